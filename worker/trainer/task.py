"""A model's task: the loss the trainer calls for every micro-batch, and the figures it reports.

A model entry may name its own `loss(model, batch)` and the `metrics` it returns besides "loss"
(docs/own-code.md, "Your own task"); without one, the trainer's cross-entropy on (input, target)
pairs applies. Either way a call gives the value to backpropagate and every figure as a
`(sum, count)` pair: a plain value v of a batch of n samples counts as (v·n, n), a pair as itself
(a token-weighted loss). The trainer sums the pairs over the epoch (`FigureSums`) and reduces them
over the ranks once, at its end: each figure is then sum over count over every sample of every
rank, whatever the accumulation and the number of ranks.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import Tensor, nn

Figure = tuple[Tensor, Tensor]  # (sum, count): float64 scalars on the rank's device, detached
LossFunction = Callable[[nn.Module, Any], Any]


class TaskError(ValueError):
    """What a model's loss returned does not fit the contract: the job fails saying so."""


def to_device(batch: Any, device: torch.device, memory_format: torch.memory_format) -> Any:
    """Every tensor of a batch (nested in tuples, lists and dicts) on `device`; 4-d tensors (images)
    in `memory_format` (channels_last for convolutional models on cuda)."""
    if isinstance(batch, Tensor):
        form = memory_format if batch.dim() == 4 else torch.contiguous_format
        return batch.to(device, non_blocking=True, memory_format=form)
    if isinstance(batch, Mapping):
        return {key: to_device(value, device, memory_format) for key, value in batch.items()}
    if isinstance(batch, tuple | list):
        return type(batch)(to_device(value, device, memory_format) for value in batch)
    return batch


def batch_size(batch: Any) -> int:
    """A batch's number of samples: the first dimension of its first tensor."""
    if isinstance(batch, Tensor):
        if batch.dim() == 0:
            raise TaskError("a batch's first tensor is a scalar: its first dimension is its number of samples")
        return len(batch)
    values = batch.values() if isinstance(batch, Mapping) else batch if isinstance(batch, tuple | list) else ()
    for value in values:
        try:
            return batch_size(value)
        except LookupError:
            continue
    raise LookupError(f"a batch without a tensor ({type(batch).__name__}): nothing says its number of samples")


def cross_entropy(model: nn.Module, batch: Any) -> Any:
    """The trainer's own loss, for classifiers of (input, target) batches. In evaluation each
    sample's loss and hits are averaged over its time steps first (a sequence target)."""
    inputs, targets = batch
    logits = model(inputs)
    if model.training:
        return F.cross_entropy(logits, targets)
    logits, n = logits.float(), len(targets)
    per_sample_loss = F.cross_entropy(logits, targets, reduction="none").reshape(n, -1).mean(dim=1)
    per_sample_hits = (logits.argmax(dim=1) == targets).float().reshape(n, -1).mean(dim=1)
    return {"loss": (per_sample_loss.sum(), n), "accuracy": (per_sample_hits.sum(), n)}


@dataclass
class StepResult:
    loss: Tensor  # what the trainer backpropagates: a mean over the batch, or a sum (loss_count set)
    loss_count: Tensor | None  # a (sum, count) loss's count; None for a mean
    figures: dict[str, Figure]
    samples: int  # the batch's (the first dimension of its first tensor)
    metric_updates: dict[str, Any] = field(default_factory=dict)  # torchmetrics' update arguments


@dataclass
class Task:
    """A model's loss function and what it reports: `train_names` in training, `val_names` in
    evaluation (without the "train_"/"val_" prefix); `val_metrics`, torchmetrics objects for some
    of the validation names, updated with what the loss returns under their name."""

    loss_function: LossFunction
    function_name: str  # as the errors name it
    train_names: tuple[str, ...]
    val_names: tuple[str, ...]
    val_metrics: dict[str, Any] = field(default_factory=dict)

    def step(self, model: nn.Module, batch: Any, training: bool) -> StepResult:
        """Call the loss on one micro-batch and check what it returned."""
        returned = self.loss_function(model, batch)
        if isinstance(returned, Tensor):
            returned = {"loss": returned}
        if not isinstance(returned, Mapping):
            raise TaskError(f"{self.function_name} returned a {type(returned).__name__}: return a tensor or a dict")
        if "loss" not in returned:
            raise TaskError(f"{self.function_name} returned {sorted(returned)}: a dict needs 'loss'")
        loss, loss_count = self._loss(returned["loss"], training)
        names = self.train_names if training else self.val_names
        self._check_names(returned, names)
        samples = batch_size(batch)
        figures: dict[str, Figure] = {}
        updates: dict[str, Any] = {}
        for name in names:
            if name in self.val_metrics:
                updates[name] = returned[name]
            else:
                figures[name] = self._figure(name, returned[name], samples, loss.device)
        return StepResult(loss, loss_count, figures, samples, updates)

    def update_metrics(self, updates: dict[str, Any]) -> None:
        """Each torchmetrics object's update with what the loss returned under its name: a dict
        of keyword arguments or a tuple of positional ones."""
        for name, arguments in updates.items():
            if isinstance(arguments, Mapping):
                self.val_metrics[name].update(**arguments)
            elif isinstance(arguments, tuple | list):
                self.val_metrics[name].update(*arguments)
            else:
                raise TaskError(
                    f"{self.function_name}'s {name!r} is {_described(arguments)}: a torchmetrics "
                    "metric takes its update's arguments, as a tuple or a dict"
                )

    def computed_metrics(self) -> dict[str, float]:
        """Each torchmetrics value over the whole validation set (synced over the ranks), then reset."""
        computed = {}
        for name, metric in self.val_metrics.items():
            value = metric.compute()
            metric.reset()
            if not isinstance(value, Tensor) or value.numel() != 1:
                raise TaskError(f"torchmetrics {name!r} computed {_described(value)}: a figure is one number")
            computed[name] = float(value.item())
        return computed

    @property
    def summed_names(self) -> tuple[str, ...]:
        """The validation figures summed as (sum, count) pairs: all but torchmetrics'."""
        return tuple(name for name in self.val_names if name not in self.val_metrics)

    def _check_names(self, returned: Mapping, names: tuple[str, ...]) -> None:
        allowed = set(names) | set(self.val_metrics)  # training may leave torchmetrics' out, or not
        undeclared = sorted(set(returned) - allowed)
        if undeclared:
            raise TaskError(
                f"{self.function_name} returned {undeclared}, which its entry does not declare "
                f"(metrics=({', '.join(repr(name) for name in names if name != 'loss')}))"
            )
        missing = [name for name in names if name not in returned]
        if missing:
            raise TaskError(f"{self.function_name} declares {missing} but did not return them")

    def _loss(self, value: Any, training: bool) -> tuple[Tensor, Tensor | None]:
        loss, count = (value[0], value[1]) if _is_pair(value) else (value, None)
        if not isinstance(loss, Tensor) or loss.numel() != 1 or not loss.is_floating_point():
            raise TaskError(f"{self.function_name}'s loss is {_described(loss)}: return a scalar float tensor")
        if training and not loss.requires_grad:
            raise TaskError(
                f"{self.function_name}'s loss {_described(loss)} has no grad: it must be computed "
                "from the model's output (not detached, not under torch.no_grad())"
            )
        if count is not None:
            count = _as_float64(count, f"{self.function_name}'s loss count", loss.device)
        return loss.reshape(()), count

    def _figure(self, name: str, value: Any, samples: int, device: torch.device) -> Figure:
        where = f"{self.function_name}'s {name!r}"
        if _is_pair(value):
            return _as_float64(value[0], where, device), _as_float64(value[1], f"{where} count", device)
        mean = _as_float64(value, where, device)
        return mean * samples, _number(samples, device)


def _is_pair(value: Any) -> bool:
    return isinstance(value, tuple | list) and len(value) == 2


def _as_float64(value: Any, where: str, device: torch.device) -> Tensor:
    if isinstance(value, Tensor) and value.numel() == 1 and value.dtype != torch.bool and not value.is_complex():
        return value.detach().reshape(()).to(device=device, dtype=torch.float64)
    if isinstance(value, int | float) and not isinstance(value, bool):
        return _number(value, device)
    raise TaskError(f"{where} is {_described(value)}: return a number, a scalar tensor or a (sum, count) pair")


def _number(value: float, device: torch.device) -> Tensor:
    """A number as a device scalar: a fill on the device's stream, not a copy from the host (which
    would wait for the GPU at every step)."""
    return torch.full((), float(value), dtype=torch.float64, device=device)


def _described(value: Any) -> str:
    if isinstance(value, Tensor):
        shown = f"{value.item():.6g}" if value.numel() == 1 else f"shape {tuple(value.shape)}"
        return f"a {str(value.dtype).removeprefix('torch.')} tensor ({shown})"
    return f"a {type(value).__name__} ({str(value)[:60]})"


class FigureSums:
    """The epoch's (sum, count) of each figure and its samples on this rank, summed without a host
    sync per step, plus what the steps before a preemption had summed over every rank."""

    def __init__(
        self,
        names: tuple[str, ...],
        device: torch.device,
        earlier: dict[str, list[float]] | None = None,
        earlier_samples: int = 0,
    ):
        self.names = names
        self.sums = torch.zeros(2 * len(names), dtype=torch.float64, device=device)
        self.samples = 0  # this rank's, this run's
        self.earlier, self.earlier_samples = earlier or {}, earlier_samples

    def add(self, figures: dict[str, Figure], samples: int) -> None:
        if self.names:
            self.sums += torch.stack([value for name in self.names for value in figures[name]])
        self.samples += samples

    def over_ranks(self) -> tuple[dict[str, list[float]], int]:
        """Every rank's sums and counts so far, and samples (one collective), with the earlier added."""
        totals = torch.cat([self.sums, self.sums.new_tensor([self.samples])])
        if dist.is_initialized() and dist.get_world_size() > 1:
            dist.all_reduce(totals)
        *values, samples = totals.tolist()
        figures = {
            name: [values[2 * index] + earlier[0], values[2 * index + 1] + earlier[1]]
            for index, name in enumerate(self.names)
            for earlier in [self.earlier.get(name, [0.0, 0.0])]
        }
        return figures, int(samples) + self.earlier_samples


def means(totals: dict[str, list[float]]) -> dict[str, float]:
    """Each figure's sum over its count (NaN where nothing was counted: the job fails saying so)."""
    return {name: total / count if count else math.nan for name, (total, count) in totals.items()}
