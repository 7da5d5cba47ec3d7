"""Model registry: a name from the spec to a builder. Models are pure nn.Modules."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from worker.trainer.models.mlp import MLP
from worker.trainer.models.wavenet import WaveNet

BUILDERS: dict[str, Callable[..., nn.Module]] = {
    "wavenet": lambda p: WaveNet(p["mu"], p["n_residue"], p["n_skip"], p["dilation_depth"], p["n_repeat"]),
    "mlp": lambda p: MLP(p["in_features"], p["hidden"], p["num_classes"]),
}


def build_model(name: str, params: dict[str, Any]) -> nn.Module:
    """Build from a validated spec's params (every default already filled)."""
    return BUILDERS[name](params)
