"""The model and the data: plain torch, nothing of trainjobs. The trainer wraps the model in DDP,
runs autocast, the gradient scaler and accumulation around it, and saves its state dict."""

import math

import torch
from torch import nn
from torch.utils.data import TensorDataset


class WaveClassifier(nn.Module):
    """Dilated 1-D convolutions (built in a loop, held in an nn.ModuleList so that DDP, the
    optimizer and the checkpoint all see them), then a mean over time and a linear head."""

    def __init__(self, channels: int, layers: int, num_classes: int):
        super().__init__()
        self.inlet = nn.Conv1d(1, channels, kernel_size=1)
        self.convs = nn.ModuleList(
            nn.Conv1d(channels, channels, kernel_size=3, dilation=2**i, padding=2**i) for i in range(layers)
        )
        self.head = nn.Linear(channels, num_classes)

    def forward(self, waves: torch.Tensor) -> torch.Tensor:
        hidden = self.inlet(waves)
        for conv in self.convs:
            hidden = hidden + torch.relu(conv(hidden))
        return self.head(hidden.mean(dim=-1))


def classifier(params: dict) -> WaveClassifier:
    return WaveClassifier(params["channels"], params["layers"], params["num_classes"])


def waves(params: dict, _data_root) -> TensorDataset:
    """`num_samples` noisy sine waves; class k has a frequency in band k. Generated from `seed`:
    the same params give the same data on every rank and every host."""
    generator = torch.Generator().manual_seed(params["seed"])
    count, length, classes = params["num_samples"], params["length"], params["classes"]
    labels = torch.randint(classes, (count,), generator=generator)
    cycles = 1.0 + labels.float() * 2.0 + torch.rand(count, generator=generator)  # per wave, in its band
    phase = torch.rand(count, 1, generator=generator) * 2 * math.pi
    time = torch.arange(length).float() / length
    signal = torch.sin(2 * math.pi * cycles[:, None] * time[None, :] + phase)
    signal = signal + params["noise"] * torch.randn(count, length, generator=generator)
    return TensorDataset(signal.unsqueeze(1), labels)
