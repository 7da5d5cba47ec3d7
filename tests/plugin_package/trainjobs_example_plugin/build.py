import time

import torch
from torch import nn
from torch.utils.data import Dataset, TensorDataset


def logistic(params: dict) -> nn.Module:
    return nn.Linear(params["in_features"], params["num_classes"])


def blobs(params: dict, _data_root) -> TensorDataset:
    generator = torch.Generator().manual_seed(params["seed"])
    centers = torch.randn(params["classes"], params["dims"], generator=generator) * 3
    labels = torch.randint(params["classes"], (params["num_samples"],), generator=generator)
    points = centers[labels] + torch.randn(params["num_samples"], params["dims"], generator=generator)
    return TensorDataset(points, labels)


class SleepyDataset(Dataset):
    """A dataset whose every sample takes `sleep_seconds` to load, as a slow disk would."""

    def __init__(self, inner: TensorDataset, sleep_seconds: float):
        self.inner = inner
        self.sleep_seconds = sleep_seconds

    def __len__(self) -> int:
        return len(self.inner)

    def __getitem__(self, index: int):
        time.sleep(self.sleep_seconds)
        return self.inner[index]


def sleepy_blobs(params: dict, data_root) -> SleepyDataset:
    return SleepyDataset(blobs(params, data_root), params["sleep_seconds"])
