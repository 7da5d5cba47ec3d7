"""Synthetic images: each class has its own mean pattern, every image is that pattern plus
noise. Learnable, generated from the seed, no download."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset


class SyntheticImages(Dataset):
    def __init__(self, num_samples: int, image_size: int, num_classes: int, seed: int):
        generator = torch.Generator().manual_seed(seed)
        patterns = torch.randn(num_classes, 3, image_size, image_size, generator=generator)
        self.labels = torch.randint(num_classes, (num_samples,), generator=generator)
        noise = torch.randn(num_samples, 3, image_size, image_size, generator=generator)
        self.images = patterns[self.labels] * 0.5 + noise

    def __len__(self) -> int:
        return self.labels.shape[0]

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.images[index], self.labels[index]


def build(params: dict, _data_root) -> SyntheticImages:
    return SyntheticImages(params["num_samples"], params["image_size"], params["num_classes"], params["seed"])
