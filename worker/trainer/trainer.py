"""The training loop. One Trainer per job attempt per rank, given its parts (builder.py) and its
checkpointer (checkpoints.py); everything a resume needs is in its state_dict.

Read `train_epoch` top to bottom: autocast, the gradient scaler, accumulation with gradient
sync on the last micro-step only, clipping and the per-step schedule are each a few lines. The
loss is the model's task's (task.py): the trainer's cross-entropy, or the model entry's own.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from contextlib import nullcontext
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from pydantic import BaseModel
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainjobs.contract.events import EpochMetrics
from trainjobs.contract.spec import JobSpec
from trainjobs.worker.trainer.builder import TrainingParts
from trainjobs.worker.trainer.checkpoints import Checkpointer
from trainjobs.worker.trainer.distributed import RankContext
from trainjobs.worker.trainer.preemption import StopAgreement
from trainjobs.worker.trainer.task import FigureSums, StepResult, means, to_device
from trainjobs.worker.trainer.telemetry import EpochTelemetry

AUTOCAST_DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
PREEMPTED = "preempted"  # fit's answer when the ranks stopped for a preemption (not a job's stop reason)


def _numpy_state() -> dict[str, Any]:
    """numpy's legacy global RNG state ("MT19937", keys, position, has_gauss, cached_gaussian) as
    a checkpoint holds it: tensors and plain numbers, which weights_only loading accepts."""
    _name, keys, position, has_gauss, gauss = np.random.get_state(legacy=True)
    return {
        "numpy": torch.from_numpy(np.asarray(keys).astype(np.int64)),
        "numpy_position": int(position),
        "numpy_gauss": [int(has_gauss), float(gauss)],
    }


def objective_value(metrics: EpochMetrics, name: str) -> float:
    """The epoch's value of the objective `name`; a name the epoch did not report fails the job
    naming the figures it did (a code model's objective is known only here)."""
    figures = metrics.figures
    if name not in figures:
        raise ValueError(f"objective.metric {name!r} is not a figure this job reports; it reports {sorted(figures)}")
    return figures[name]


def _partial_sums(state: dict[str, Any]) -> tuple[dict[str, list[float]], int]:
    """A checkpoint's sums of its epoch's steps so far, and their samples. Checkpoints from before
    the task's figures held [loss sum, samples]."""
    partial = state.get("partial", {})
    if isinstance(partial, list | tuple):
        loss_sum, samples = partial
        return ({"loss": [float(loss_sum), float(samples)]} if samples else {}), int(samples)
    return {name: [float(total), float(count)] for name, (total, count) in partial.items()}, int(
        state.get("partial_samples", 0)
    )


def _as_tuples(value: Any) -> Any:
    """random.setstate wants tuples where a checkpoint may hold lists."""
    return tuple(_as_tuples(item) for item in value) if isinstance(value, list | tuple) else value


class Trainer:
    def __init__(
        self,
        spec: JobSpec,
        parts: TrainingParts,
        rank: RankContext,
        checkpointer: Checkpointer,
        report: Callable[[BaseModel], None] | None = None,
        telemetry: EpochTelemetry | None = None,
        stop: StopAgreement | None = None,
    ):
        self.spec = spec
        self.rank = rank
        self.checkpointer = checkpointer
        self.report = report  # rank 0 only; None elsewhere
        self.raw_model, self.model = parts.model, parts.wrapped  # the plain model, and what a step calls
        self.train_loader, self.train_sampler = parts.train_loader, parts.train_sampler
        self.val_loader = parts.val_loader
        self.optimizer, self.scheduler, self.scaler = parts.optimizer, parts.scheduler, parts.scaler
        self.memory_format, self.steps_per_epoch = parts.memory_format, parts.steps_per_epoch
        self.task = parts.task  # the loss and the figures it reports
        # Data wait, peak memory, GPU use and in-epoch progress (reported by rank 0).
        self.telemetry = telemetry or EpochTelemetry(
            rank.device, rank.world_size, spec.epochs, self.steps_per_epoch, None
        )

        self.stop = stop  # the ranks' agreement to stop for a preemption (None: never asked)
        self.batches_per_epoch = len(self.train_loader)  # micro-batches of a whole epoch, per rank
        self.samples_per_epoch = self.train_sampler.num_samples  # per rank

        self.epoch = 0  # last finished epoch
        self.objective = spec.objective  # which figure says an epoch is the best so far
        self.best_objective = self.objective.worst
        self.epochs_without_improvement = 0
        # Inside an epoch (a preemption's checkpoint): optimizer steps done in epoch + 1, what their
        # figures and samples summed (over all ranks), and the RNG state before the epoch's loader
        # iterator was made.
        self.step = 0
        self.partial: dict[str, list[float]] = {}
        self.partial_samples = 0
        self.epoch_rng: torch.Tensor | None = None

    # ---- the loop ------------------------------------------------------------------------------

    def fit(self) -> str:
        """Train the remaining epochs; return the stop reason ("completed", "early_stopping", or
        PREEMPTED: asked to stop, the ranks stopped at one step, checkpointed there)."""
        try:
            return self._epochs()
        finally:
            if self.stop is not None:
                self.stop.finish()  # no vote left in flight when the ranks tear down

    def _epochs(self) -> str:
        for epoch in range(self.epoch + 1, self.spec.epochs + 1):
            metrics = self.run_epoch(epoch)
            if metrics is None:
                return PREEMPTED
            value = objective_value(metrics, self.objective.metric)
            improved = self.objective.improves(value, self.best_objective, self._min_delta())
            if improved:
                self.best_objective, self.epochs_without_improvement = value, 0
            else:
                self.epochs_without_improvement += 1
            self.epoch = epoch
            stopping = self._should_stop_early()
            preempted = self.stop is not None and not stopping and epoch < self.spec.epochs and self.stop.now()
            if self.rank.is_main:
                assert self.report is not None
                self.report(metrics)
                if improved or stopping or preempted or self._checkpoint_due(epoch):
                    self.checkpointer.save(epoch, self.state_dict(), is_best=improved, objective=value)
            if stopping:
                return "early_stopping"
            if preempted:
                return PREEMPTED
        return "completed"

    def run_epoch(self, epoch: int) -> EpochMetrics | None:
        """One epoch's training and evaluation, and its metrics; None when the ranks stopped inside
        it for a preemption (rank 0 has checkpointed the step they stopped at)."""
        start = time.perf_counter()
        trained = self.train_epoch(epoch)
        if trained is None:
            return None
        train, samples = trained
        telemetry = self.telemetry.finish_epoch()
        seconds = time.perf_counter() - start
        figures = {f"train_{name}": value for name, value in train.items()}
        figures.update({f"val_{name}": value for name, value in self.evaluate().items()})
        lr = self.optimizer.param_groups[0]["lr"]
        # A loss can diverge after the last checked step (one step per epoch, say): the job fails
        # here, saying so, rather than reporting numbers that JSON cannot carry.
        for name, value in {**figures, "lr": lr}.items():
            if not math.isfinite(value):
                raise FloatingPointError(
                    f"{name} is not finite at epoch {epoch} ({value}, from {self.task.function_name}): the run diverged"
                )
        return EpochMetrics(
            epoch=epoch,
            lr=lr,
            epoch_seconds=seconds,
            samples_per_second=samples / seconds if seconds > 0 else 0.0,
            **figures,
            **telemetry,
        )

    def train_epoch(self, epoch: int) -> tuple[dict[str, float], int] | None:
        """One pass over this rank's shard (from `self.step` on, after a preemption's checkpoint);
        returns the figures' means and the samples over all ranks, or None when the ranks agreed
        to stop inside it (a preemption: rank 0 has checkpointed the step)."""
        spec, device = self.spec, self.rank.device
        self.model.train()
        skipped = self._start_epoch(epoch)
        n_batches = self.batches_per_epoch
        sums = FigureSums(self.task.train_names, device, self.partial, self.partial_samples)
        first_bad = (torch.full((), -1, dtype=torch.long, device=device), torch.zeros((), device=device))
        group_count = torch.zeros((), dtype=torch.float64, device=device)  # a (sum, count) loss's
        for index, batch in enumerate(self.telemetry.batches(self._epoch_batches)):
            step = skipped + index  # the micro-batch's place in the whole epoch
            batch = to_device(batch, device, self.memory_format)
            # Micro-batches form groups of accumulation_steps; a trailing group may be shorter.
            group_start = step - step % spec.accumulation_steps
            group_size = min(spec.accumulation_steps, n_batches - group_start)
            last_micro_step = step == group_start + group_size - 1
            # Gradients are all-reduced on the group's last backward only; the others accumulate locally.
            sync = nullcontext() if last_micro_step or not self._is_ddp else self.model.no_sync()
            with sync:
                with self._autocast():
                    result = self.task.step(self.model, batch, training=True)
                self.scaler.scale(self._share_of_group(result, group_start, group_size)).backward()
            sums.add(result.figures, result.samples)
            if result.loss_count is not None:
                group_count += result.loss_count
            first_bad = self._first_bad(first_bad, step, result.loss.detach())  # checked at the end
            if last_micro_step:
                if result.loss_count is not None:
                    self._divide_gradients(group_count)  # and counts the next group from 0
                self._optimizer_step(sums.samples)
                inside = step + 1 < n_batches  # a stop at the epoch's last step waits for its end
                if inside and self.stop is not None and self.stop.after_step():
                    self._checkpoint_inside(epoch, (step + 1) // spec.accumulation_steps, sums)
                    return None
        self._fail_if_diverged(epoch, first_bad, n_batches)
        totals, samples = sums.over_ranks()
        self.step, self.partial, self.partial_samples = 0, {}, 0
        return means(totals), samples

    def _share_of_group(self, result: StepResult, group_start: int, group_size: int) -> torch.Tensor:
        """What this micro-batch backpropagates, so that a group of micro-batches equals one batch
        of them all: a mean loss weighted by the batch's share of the group's samples; a summed
        loss as it is (`_divide_gradients` divides by the group's count over every rank)."""
        if result.loss_count is not None:
            return result.loss
        first = group_start * self.train_loader.batch_size
        group_samples = min(first + group_size * self.train_loader.batch_size, self.samples_per_epoch) - first
        return result.loss * (result.samples / group_samples)

    def _divide_gradients(self, group_count: torch.Tensor) -> None:
        """A summed loss's gradients (averaged over the ranks by DDP) over the group's count of
        every rank: the gradient of the group's sum over its count (zero where it counted none)."""
        total = group_count.clone()
        ranks = self.rank.world_size if self._is_ddp else 1
        if ranks > 1:
            dist.all_reduce(total)
        factor = torch.where(total > 0, ranks / total.clamp(min=1e-300), 0.0).float()
        group_count.zero_()
        for parameter in self.raw_model.parameters():
            if parameter.grad is not None:
                parameter.grad.mul_(factor)

    @staticmethod
    def _first_bad(first_bad: tuple[torch.Tensor, torch.Tensor], step: int, loss: torch.Tensor):
        """The first micro-batch whose loss is not finite, and that loss, without a host sync."""
        bad_step, bad_loss = first_bad
        new = (bad_step < 0) & ~torch.isfinite(loss)
        return torch.where(new, step, bad_step), torch.where(new, loss.float(), bad_loss)

    def _optimizer_step(self, samples: int) -> None:
        """Clip, step (under fp16 the scaler skips a step with inf/nan gradients), schedule."""
        if self.spec.grad_clip_norm is not None:
            self.scaler.unscale_(self.optimizer)
            nn.utils.clip_grad_norm_(self.raw_model.parameters(), self.spec.grad_clip_norm)
        self.scaler.step(self.optimizer)
        self.scaler.update()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()
        self.telemetry.optimizer_step(samples)

    def _start_epoch(self, epoch: int) -> int:
        """Set the epoch's shuffle and make its loader iterator (`_epoch_batches`), starting after
        the micro-batches a preemption's checkpoint had done (their number is returned). The
        iterator draws its loader workers' seed from the torch RNG: a resumed epoch makes it from
        the RNG state its first start had, then takes up the RNG where the checkpoint left it."""
        self.train_sampler.set_epoch(epoch)  # a different shuffle each epoch, the same on every rank
        skipped = self.step * self.spec.accumulation_steps
        self.train_sampler.skip = skipped * self.train_loader.batch_size
        self.telemetry.start_epoch(epoch)
        self.telemetry.step = self.step  # progress counts the steps done before the preemption too
        resumed_rng = torch.get_rng_state() if skipped else None
        if skipped and self.epoch_rng is not None:
            torch.set_rng_state(self.epoch_rng)
        self.epoch_rng = torch.get_rng_state()
        self._epoch_batches = iter(self.train_loader)
        if resumed_rng is not None:
            torch.set_rng_state(resumed_rng)
        return skipped

    def _checkpoint_inside(self, epoch: int, step: int, sums: FigureSums) -> None:
        """Every rank stops after optimizer step `step` of `epoch`; rank 0 checkpoints it, with the
        epoch's sums so far over all ranks (its metrics then count every sample once)."""
        self.step = step
        self.partial, self.partial_samples = sums.over_ranks()
        if self.rank.is_main:
            started = time.perf_counter()
            self.checkpointer.save(self.epoch, self.state_dict(), is_best=False, step=step)
            seconds = time.perf_counter() - started
            print(f"preempted: checkpointed step {step} of epoch {epoch} in {seconds:.3f} s", flush=True)

    def _fail_if_diverged(self, epoch: int, first_bad: tuple[torch.Tensor, torch.Tensor], n_batches: int) -> None:
        """fp32 and bf16: a non-finite loss fails the job. fp16: the scaler skips such steps."""
        bad_step = int(first_bad[0].item())
        if bad_step >= 0 and self.spec.precision != "fp16":
            raise FloatingPointError(
                f"loss is not finite at epoch {epoch}, step {bad_step + 1} of {n_batches}: "
                f"{self.task.function_name} returned {first_bad[1].item()}"
            )

    @torch.no_grad()
    def evaluate(self) -> dict[str, float]:
        """The validation figures over the whole validation set (all ranks): each one's mean over
        its samples (or its count), and the torchmetrics ones as they compute."""
        device = self.rank.device
        self.model.eval()
        sums = FigureSums(self.task.summed_names, device)
        for batch in self.val_loader:
            batch = to_device(batch, device, self.memory_format)
            with self._autocast():
                result = self.task.step(self.raw_model, batch, training=False)
            sums.add(result.figures, result.samples)
            self.task.update_metrics(result.metric_updates)
        totals, _samples = sums.over_ranks()
        return {**means(totals), **self.task.computed_metrics()}

    def load_weights(self, weights: dict[str, torch.Tensor]) -> list[str]:
        """init_from: take the weights whose names and shapes match; return the keys skipped
        (a new head for another number of classes, say)."""
        own = self.raw_model.state_dict()
        usable = {key: value for key, value in weights.items() if key in own and own[key].shape == value.shape}
        self.raw_model.load_state_dict(usable, strict=False)
        return sorted(set(own) - set(usable))

    # ---- state ------------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        return {
            "model": self.raw_model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "scaler": self.scaler.state_dict() if self.scaler.is_enabled() else None,
            "epoch": self.epoch,
            "best_objective": self.best_objective,
            "epochs_without_improvement": self.epochs_without_improvement,
            **self.checkpointer.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state(self.rank.device) if self.rank.device.type == "cuda" else None,
                "python": random.getstate(),
                **_numpy_state(),
                "epoch_start": self.epoch_rng if self.step else None,
            },
            "step": self.step,
            "partial": self.partial,
            "partial_samples": self.partial_samples,
            "spec": self.spec.model_dump(mode="json"),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.raw_model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        if state["scaler"] is not None:
            self.scaler.load_state_dict(state["scaler"])
        self.epoch = state["epoch"]
        # Checkpoints from before objectives were val_loss's (their only objective).
        self.best_objective = state["best_objective"] if "best_objective" in state else state["best_val_loss"]
        self.epochs_without_improvement = state["epochs_without_improvement"]
        self.checkpointer.load_state_dict(state)
        rng = state["rng"]
        torch.set_rng_state(rng["torch"])
        if rng.get("cuda") is not None and self.rank.device.type == "cuda":
            torch.cuda.set_rng_state(rng["cuda"], self.rank.device)
        if rng.get("python") is not None:  # checkpoints before preemption have none
            random.setstate(_as_tuples(rng["python"]))
            has_gauss, gauss = rng.get("numpy_gauss", (0, 0.0))
            keys = rng["numpy"].numpy().astype(np.uint32)
            np.random.set_state(("MT19937", keys, rng["numpy_position"], has_gauss, gauss))
        self.step = state.get("step", 0)
        self.partial, self.partial_samples = _partial_sums(state)
        self.epoch_rng = rng.get("epoch_start")

    # ---- small rules ---------------------------------------------------------------------------

    @property
    def _is_ddp(self) -> bool:
        return isinstance(self.model, DistributedDataParallel)

    def _autocast(self):
        dtype = AUTOCAST_DTYPES.get(self.spec.precision)
        return torch.autocast(self.rank.device.type, dtype=dtype) if dtype else nullcontext()

    def _min_delta(self) -> float:
        return self.spec.early_stopping.min_delta if self.spec.early_stopping else 0.0

    def _should_stop_early(self) -> bool:
        rule = self.spec.early_stopping
        return rule is not None and self.epochs_without_improvement >= rule.patience and self.epoch < self.spec.epochs

    def _checkpoint_due(self, epoch: int) -> bool:
        return epoch % self.spec.checkpoint.every_epochs == 0 or epoch == self.spec.epochs
