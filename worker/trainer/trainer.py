"""The training loop. One Trainer per job attempt per rank, given its parts (builder.py) and its
checkpointer (checkpoints.py); everything a resume needs is in its state_dict.

Read `train_epoch` top to bottom: autocast, the gradient scaler, accumulation with gradient
sync on the last micro-step only, clipping and the per-step schedule are each a few lines.
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
import torch.nn.functional as F
from pydantic import BaseModel
from torch import nn
from torch.nn.parallel import DistributedDataParallel

from trainjobs.contract.events import EpochMetrics
from trainjobs.contract.spec import JobSpec
from trainjobs.worker.trainer.builder import TrainingParts
from trainjobs.worker.trainer.checkpoints import Checkpointer
from trainjobs.worker.trainer.distributed import RankContext, all_reduce_sum
from trainjobs.worker.trainer.preemption import StopAgreement
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
    figures = {
        key: value
        for key, value in metrics.model_dump().items()
        if key.startswith(("train_", "val_")) and isinstance(value, float)
    }
    if name not in figures:
        raise ValueError(f"objective.metric {name!r} is not a figure this job reports; it reports {sorted(figures)}")
    return figures[name]


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
        self.raw_model = parts.model
        self.model = parts.wrapped
        self.train_loader, self.train_sampler = parts.train_loader, parts.train_sampler
        self.val_loader = parts.val_loader
        self.optimizer, self.scheduler, self.scaler = parts.optimizer, parts.scheduler, parts.scaler
        self.memory_format = parts.memory_format
        self.steps_per_epoch = parts.steps_per_epoch
        # Data wait, peak memory, GPU use and in-epoch progress (reported by rank 0).
        self.telemetry = telemetry or EpochTelemetry(
            rank.device, rank.world_size, spec.epochs, self.steps_per_epoch, None
        )

        self.stop = stop  # the ranks' agreement to stop for a preemption (None: never asked)
        self.batches_per_epoch = len(self.train_loader)  # micro-batches of a whole epoch, per rank

        self.epoch = 0  # last finished epoch
        self.objective = spec.objective  # which figure says an epoch is the best so far
        self.best_objective = self.objective.worst
        self.epochs_without_improvement = 0
        # Inside an epoch (a preemption's checkpoint): optimizer steps done in epoch + 1, what they
        # summed (over all ranks), and the RNG state before the epoch's loader iterator was made.
        self.step = 0
        self.partial: tuple[float, int] = (0.0, 0)
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
        train_loss, samples = trained
        figures = self.telemetry.finish_epoch()
        seconds = time.perf_counter() - start
        val_loss, val_accuracy = self.evaluate()
        lr = self.optimizer.param_groups[0]["lr"]
        # A loss can diverge after the last checked step (one step per epoch, say): the job fails
        # here, saying so, rather than reporting numbers that JSON cannot carry.
        for what, value in (("training loss", train_loss), ("validation loss", val_loss), ("learning rate", lr)):
            if not math.isfinite(value):
                raise FloatingPointError(f"{what} is not finite at epoch {epoch} ({value}): the run diverged")
        return EpochMetrics(
            epoch=epoch,
            train_loss=train_loss,
            val_loss=val_loss,
            val_accuracy=val_accuracy,
            lr=lr,
            epoch_seconds=seconds,
            samples_per_second=samples / seconds if seconds > 0 else 0.0,
            **figures,
        )

    def train_epoch(self, epoch: int) -> tuple[float, int] | None:
        """One pass over this rank's shard (from `self.step` on, after a preemption's checkpoint);
        returns the global mean loss and global samples, or None when the ranks agreed to stop
        inside it (a preemption: rank 0 has checkpointed the step)."""
        spec, device = self.spec, self.rank.device
        self.model.train()
        skipped = self._start_epoch(epoch)
        n_batches = self.batches_per_epoch
        loss_sum = torch.zeros((), dtype=torch.float64, device=device)
        first_bad_step = torch.full((), -1, dtype=torch.long, device=device)
        samples = 0
        for index, (inputs, targets) in enumerate(self.telemetry.batches(self._epoch_batches)):
            step = skipped + index  # the micro-batch's place in the whole epoch
            inputs = inputs.to(device, non_blocking=True, memory_format=self._input_format(inputs))
            targets = targets.to(device, non_blocking=True)
            # Micro-batches form groups of accumulation_steps; a trailing group may be shorter.
            group_start = step - step % spec.accumulation_steps
            group_size = min(spec.accumulation_steps, n_batches - group_start)
            last_micro_step = step == group_start + group_size - 1
            # Gradients are all-reduced on the group's last backward only; the others accumulate locally.
            sync = nullcontext() if last_micro_step or not self._is_ddp else self.model.no_sync()
            with sync:
                with self._autocast():
                    loss = F.cross_entropy(self.model(inputs), targets)
                self.scaler.scale(loss / group_size).backward()
            loss = loss.detach()
            loss_sum += loss * len(inputs)
            samples += len(inputs)
            # Remember the first non-finite step without a host sync per step; checked below.
            first_bad_step = torch.where((first_bad_step < 0) & ~torch.isfinite(loss), step, first_bad_step)
            if last_micro_step:
                self._optimizer_step(samples)
                inside = step + 1 < n_batches  # a stop at the epoch's last step waits for its end
                if inside and self.stop is not None and self.stop.after_step():
                    self._checkpoint_inside(epoch, (step + 1) // spec.accumulation_steps, loss_sum, samples)
                    return None
        self._fail_if_diverged(epoch, int(first_bad_step.item()), n_batches)
        return self._epoch_totals(loss_sum, samples)

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

    def _epoch_totals(self, loss_sum: torch.Tensor, samples: int) -> tuple[float, int]:
        """The epoch's global mean loss and samples: this run's over all ranks, and what the steps
        before a preemption had summed."""
        earlier_loss, earlier_samples = self.partial
        self.step, self.partial = 0, (0.0, 0)
        total_loss, total_samples = all_reduce_sum([loss_sum.item(), samples], self.rank.device)
        total_loss, total_samples = total_loss + earlier_loss, total_samples + earlier_samples
        return total_loss / max(total_samples, 1), int(total_samples)

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

    def _checkpoint_inside(self, epoch: int, step: int, loss_sum: torch.Tensor, samples: int) -> None:
        """Every rank stops after optimizer step `step` of `epoch`; rank 0 checkpoints it, with the
        epoch's sums so far over all ranks (its metrics then count every sample once)."""
        total_loss, total_samples = all_reduce_sum([loss_sum.item(), samples], self.rank.device)
        earlier_loss, earlier_samples = self.partial
        self.step, self.partial = step, (total_loss + earlier_loss, int(total_samples + earlier_samples))
        if self.rank.is_main:
            started = time.perf_counter()
            self.checkpointer.save(self.epoch, self.state_dict(), is_best=False, step=step)
            seconds = time.perf_counter() - started
            print(f"preempted: checkpointed step {step} of epoch {epoch} in {seconds:.3f} s", flush=True)

    def _fail_if_diverged(self, epoch: int, bad_step: int, n_batches: int) -> None:
        """fp32 and bf16: a non-finite loss fails the job. fp16: the scaler skips such steps."""
        if bad_step >= 0 and self.spec.precision != "fp16":
            raise FloatingPointError(f"loss is not finite at epoch {epoch}, step {bad_step + 1} of {n_batches}")

    @torch.no_grad()
    def evaluate(self) -> tuple[float, float]:
        """Mean validation loss and accuracy over the whole validation set (all ranks)."""
        device = self.rank.device
        self.model.eval()
        loss_sum, correct, count = 0.0, 0.0, 0.0
        for inputs, targets in self.val_loader:
            inputs = inputs.to(device, non_blocking=True, memory_format=self._input_format(inputs))
            targets = targets.to(device, non_blocking=True)
            with self._autocast():
                logits = self.raw_model(inputs).float()
            # Per sample first (a sequence target averages its time steps), then summed.
            per_sample_loss = F.cross_entropy(logits, targets, reduction="none").reshape(len(targets), -1)
            per_sample_hits = (logits.argmax(dim=1) == targets).float().reshape(len(targets), -1)
            loss_sum += per_sample_loss.mean(dim=1).sum().item()
            correct += per_sample_hits.mean(dim=1).sum().item()
            count += len(targets)
        loss_sum, correct, count = all_reduce_sum([loss_sum, correct, count], device)
        return loss_sum / max(count, 1), correct / max(count, 1)

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
            "partial": list(self.partial),
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
        earlier_loss, earlier_samples = state.get("partial", (0.0, 0))
        self.partial = (float(earlier_loss), int(earlier_samples))
        self.epoch_rng = rng.get("epoch_start")

    # ---- small rules ---------------------------------------------------------------------------

    @property
    def _is_ddp(self) -> bool:
        return isinstance(self.model, DistributedDataParallel)

    def _input_format(self, inputs: torch.Tensor) -> torch.memory_format:
        return self.memory_format if inputs.dim() == 4 else torch.contiguous_format

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
