"""A deterministic train/validation split: the same seed gives the same split on every rank."""

from __future__ import annotations

import torch
from torch.utils.data import Dataset, Subset


def split_train_val(full: Dataset, val_fraction: float, seed: int) -> tuple[Dataset, Dataset]:
    n = len(full)
    n_val = min(max(1, round(n * val_fraction)), n - 1)
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed)).tolist()
    return Subset(full, order[n_val:]), Subset(full, order[:n_val])
