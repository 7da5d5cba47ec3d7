"""A regression on dict batches: y = x·w + noise. The loss is the mean squared error; the
mean absolute error is reported beside it (declared as `metrics=("mae",)` in catalog.py)."""

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import Dataset


class LinearTargets(Dataset):
    """{"features": x, "target": y} items."""

    def __init__(self, params: dict):
        generator = torch.Generator().manual_seed(params["seed"])
        self.features = torch.randn(params["num_samples"], params["dims"], generator=generator)
        weights = torch.randn(params["dims"], generator=generator)
        noise = params["noise"] * torch.randn(params["num_samples"], generator=generator)
        self.targets = self.features @ weights + noise

    def __len__(self) -> int:
        return len(self.targets)

    def __getitem__(self, index: int) -> dict:
        return {"features": self.features[index], "target": self.targets[index]}


def linear_targets(params: dict, _data_root) -> LinearTargets:
    return LinearTargets(params)


def regressor(params: dict) -> nn.Module:
    return nn.Sequential(nn.Linear(params["dims"], params["hidden"]), nn.Tanh(), nn.Linear(params["hidden"], 1))


def loss(model: nn.Module, batch: dict) -> dict:
    """The trainer moves the dict's tensors to the device and calls this for every micro-batch:
    with the DDP-wrapped model in training, the plain one under no_grad in evaluation."""
    prediction = model(batch["features"]).squeeze(-1)
    return {"loss": F.mse_loss(prediction, batch["target"]), "mae": (prediction - batch["target"]).abs().mean()}
