"""Datasets read from folders under TRAINJOBS_DATA_ROOT: images (a sub-folder per class) and WAV
files (cut into clips, mu-law encoded)."""

from __future__ import annotations

import wave
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from trainjobs.worker.trainer.data.mulaw import mulaw_encode
from trainjobs.worker.trainer.data.paths import confined, inside_data_root

IMAGE_SUFFIXES = {".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp"}


class ImageFolder(Dataset):
    """Images resized to a square, as float tensors in [0, 1]; labels from sorted folder names."""

    def __init__(self, root: Path, image_size: int, data_root: Path):
        self.classes = sorted(entry.name for entry in root.iterdir() if entry.is_dir())
        self.samples = [
            (confined(path, data_root), label)
            for label, name in enumerate(self.classes)
            for path in sorted(confined(root / name, data_root).iterdir())
            if path.suffix.lower() in IMAGE_SUFFIXES
        ]
        if len(self.classes) < 2 or not self.samples:
            raise ValueError(f"{root} needs at least two class folders with images")
        self.image_size = image_size

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        from PIL import Image

        path, label = self.samples[index]
        with Image.open(path) as image:
            pixels = np.asarray(image.convert("RGB").resize((self.image_size, self.image_size)), dtype=np.float32)
        return torch.from_numpy(pixels).permute(2, 0, 1) / 255.0, label


def read_wav(path: Path) -> np.ndarray:
    """A 16-bit PCM WAV file as float32 in [-1, 1], channels averaged to mono."""
    with wave.open(str(path), "rb") as file:
        if file.getsampwidth() != 2:
            raise ValueError(f"{path.name}: only 16-bit PCM WAV is supported")
        frames = np.frombuffer(file.readframes(file.getnframes()), dtype="<i2")
        channels = file.getnchannels()
    return frames.reshape(-1, channels).mean(axis=1).astype(np.float32) / 32768.0


def wav_clips(root: Path, length: int, mu: int, data_root: Path | None = None) -> torch.Tensor:
    """Every .wav under root, cut into non-overlapping clips of length + 1 codes (each file
    confined to `data_root`, when given)."""
    clips = []
    for path in sorted(root.rglob("*.wav")):
        codes = mulaw_encode(torch.from_numpy(read_wav(confined(path, data_root) if data_root else path)), mu)
        usable = (len(codes) // (length + 1)) * (length + 1)
        clips.append(codes[:usable].reshape(-1, length + 1))
    if not clips or sum(len(part) for part in clips) < 2:
        raise ValueError(f"{root} holds fewer than two clips of {length + 1} samples")
    return torch.cat(clips)


class CodeClips(Dataset):
    """mu-law clips: input codes[:-1], target codes[1:] (next-sample prediction)."""

    def __init__(self, codes: torch.Tensor, mu: int):
        self.codes = codes
        self.mu = mu

    def __len__(self) -> int:
        return self.codes.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        clip = self.codes[index].long()
        return clip[:-1], clip[1:]


def build_image_folder(params: dict, data_root: Path) -> ImageFolder:
    return ImageFolder(inside_data_root(data_root, params["root"]), params["image_size"], data_root)


def build_wav_folder(params: dict, data_root: Path) -> CodeClips:
    root = inside_data_root(data_root, params["root"])
    return CodeClips(wav_clips(root, params["length"], params["mu"], data_root), params["mu"])
