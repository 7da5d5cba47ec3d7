"""Learning-rate schedule, per optimizer step over fractional epochs: linear warm-up over
`warmup_epochs`, then constant ("none"), cosine annealing to 0 ("cosine"), or a factor `gamma`
every `step_size` epochs ("step"). The peak is the effective (batch-scaled) lr."""

from __future__ import annotations

import math

from torch.optim import Optimizer
from torch.optim.lr_scheduler import LambdaLR

from trainjobs.contract.spec import SchedulerSpec


def lr_factor(spec: SchedulerSpec, epochs: int, progress: float) -> float:
    """The multiplier of the peak lr after `progress` epochs of training (fractional)."""
    warmup = spec.warmup_epochs
    if warmup and progress < warmup:
        return progress / warmup
    after = progress - warmup
    if spec.name == "cosine":
        span = max(epochs - warmup, 1e-9)
        return 0.5 * (1.0 + math.cos(math.pi * min(after / span, 1.0)))
    if spec.name == "step":
        assert spec.gamma is not None and spec.step_size is not None  # the spec requires both for "step"
        return spec.gamma ** int(after // spec.step_size)
    return 1.0


def build_scheduler(optimizer: Optimizer, spec: SchedulerSpec, epochs: int, steps_per_epoch: int) -> LambdaLR:
    # LambdaLR calls this with the optimizer steps taken so far: 0 at construction, then 1, 2...
    return LambdaLR(optimizer, lambda step: lr_factor(spec, epochs, step / steps_per_epoch))
