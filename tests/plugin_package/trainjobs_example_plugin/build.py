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


LEAK_VARIABLE = "TRAINJOBS_EXAMPLE_LEAK"
LEAK_FILE = "/tmp/trainjobs-example-leak"


def leaky(params: dict) -> nn.Module:
    """A model whose job reaches outside itself, as user code may: it says what it finds of an
    earlier job in its process (an environment variable, an open file, the random state), then
    leaves each of those behind for a later one."""
    import os
    import random

    open_files = sorted(
        os.readlink(f"/proc/self/fd/{fd}")
        for fd in os.listdir("/proc/self/fd")
        if os.path.exists(f"/proc/self/fd/{fd}") and os.readlink(f"/proc/self/fd/{fd}").startswith(LEAK_FILE)
    )
    print(
        f"found: env={os.environ.get(LEAK_VARIABLE)!r} files={open_files} "
        f"random={random.random():.12f} torch={torch.rand(1).item():.12f}",
        flush=True,
    )
    os.environ[LEAK_VARIABLE] = "left by an earlier job"
    leaked = open(LEAK_FILE, "a")  # noqa: SIM115 - left open on purpose
    leaky.kept = leaked  # type: ignore[attr-defined]
    random.seed(999)
    torch.manual_seed(999)
    return nn.Linear(params["in_features"], params["num_classes"])
