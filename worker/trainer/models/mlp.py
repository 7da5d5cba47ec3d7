"""A multilayer perceptron over flattened inputs."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, in_features: int, hidden: list[int], num_classes: int):
        super().__init__()
        widths = [in_features, *hidden]
        layers: list[nn.Module] = [nn.Flatten()]
        for width_in, width_out in zip(widths, widths[1:], strict=False):
            layers += [nn.Linear(width_in, width_out), nn.ReLU()]
        layers.append(nn.Linear(widths[-1], num_classes))
        self.layers = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.layers(x)


def build(params: dict) -> MLP:
    return MLP(params["in_features"], params["hidden"], params["num_classes"])
