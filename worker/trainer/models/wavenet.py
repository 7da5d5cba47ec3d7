"""WaveNet (van den Oord et al., 2016) for mu-law audio: next-sample prediction.

Every dilated layer is built in __init__ and held in an nn.ModuleList, so that DDP (and
DataParallel) see and replicate all of them; layers created inside forward() would be invisible
to both, which is the bug the design note starts from.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


class WaveNet(nn.Module):
    def __init__(self, mu: int, n_residue: int, n_skip: int, dilation_depth: int, n_repeat: int):
        super().__init__()
        self.mu = mu
        self.n_residue = n_residue
        self.dilations = [2**d for d in range(dilation_depth)] * n_repeat
        self.embed = nn.Embedding(mu, n_residue)
        self.dilated_convs = nn.ModuleList(
            nn.Conv1d(n_residue, 2 * n_residue, kernel_size=2, dilation=d) for d in self.dilations
        )
        # The last layer feeds only the skip path: a residual conv there would get no gradient,
        # which DDP rightly refuses.
        self.residual_convs = nn.ModuleList(nn.Conv1d(n_residue, n_residue, 1) for _ in self.dilations[:-1])
        self.skip_convs = nn.ModuleList(nn.Conv1d(n_residue, n_skip, 1) for _ in self.dilations)
        self.head = nn.Sequential(nn.ReLU(), nn.Conv1d(n_skip, n_skip, 1), nn.ReLU(), nn.Conv1d(n_skip, mu, 1))

    @property
    def receptive_field(self) -> int:
        return 1 + sum(self.dilations)

    def forward(self, codes: torch.Tensor) -> torch.Tensor:
        """codes: (batch, time) ints in [0, mu) -> logits (batch, mu, time) for the next sample."""
        x = self.embed(codes).transpose(1, 2)
        skip = 0
        layers = zip(self.dilations, self.dilated_convs, self.skip_convs, strict=True)
        for layer, (dilation, dilated, to_skip) in enumerate(layers):
            # Left padding keeps the convolution causal and the length unchanged.
            filter_, gate = dilated(F.pad(x, (dilation, 0))).chunk(2, dim=1)
            gated = torch.tanh(filter_) * torch.sigmoid(gate)
            skip = skip + to_skip(gated)
            if layer < len(self.residual_convs):
                x = x + self.residual_convs[layer](gated)
        return self.head(skip)


def build(params: dict) -> WaveNet:
    return WaveNet(params["mu"], params["n_residue"], params["n_skip"], params["dilation_depth"], params["n_repeat"])
