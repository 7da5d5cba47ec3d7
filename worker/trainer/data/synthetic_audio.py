"""Synthetic audio: sums of a few sines with noise, mu-law encoded. Generated once from the
seed (identical on every rank), so next-sample prediction has something real to learn."""

from __future__ import annotations

import math

import torch
from torch.utils.data import Dataset

from trainjobs.worker.trainer.data.mulaw import mulaw_encode


class SyntheticAudio(Dataset):
    def __init__(self, num_samples: int, length: int, mu: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        t = torch.arange(length + 1, dtype=torch.float32)
        frequencies = torch.rand(num_samples, 3, 1, generator=generator) * 0.2 + 0.01  # cycles per sample
        phases = torch.rand(num_samples, 3, 1, generator=generator) * 2 * math.pi
        amplitudes = torch.rand(num_samples, 3, 1, generator=generator) * 0.3
        waves = (amplitudes * torch.sin(2 * math.pi * frequencies * t + phases)).sum(dim=1)
        waves = waves + 0.01 * torch.randn(waves.shape, generator=generator)
        self.codes = mulaw_encode(waves.clamp(-1, 1), mu)

    def __len__(self) -> int:
        return self.codes.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        clip = self.codes[index]
        return clip[:-1], clip[1:]


def build(params: dict, _data_root) -> SyntheticAudio:
    return SyntheticAudio(params["num_samples"], params["length"], params["mu"], params["seed"])
