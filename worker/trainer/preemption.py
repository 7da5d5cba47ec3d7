"""Stopping for a preemption: every rank at the same optimizer step, with nothing lost.

The worker tells the launcher (SIGUSR1), the launcher tells each rank (SIGUSR1, again each second
until they stop: a rank that is still starting ignores it, as its fork server does), and each rank
notes it (`StopRequest`). The ranks then agree on the step to stop at with one collective per
optimizer step (`StopAgreement`): a MAX all-reduce of "asked" over a gloo group of their own, on
CPU tensors, so a GPU job's loop takes no device sync for it. Each step's vote is launched
asynchronously and read at the next step, where it has long arrived: every rank reads the same
result at the same step, and the wait costs nothing. Rank 0 then writes a checkpoint of that step
(trainer.py), and the ranks exit.

`ResumableSampler` lets a resumed attempt skip the samples of the steps already done without
loading them: the sampler hands the loader only what follows.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from itertools import islice

import torch
import torch.distributed as dist
from torch.utils.data import DistributedSampler

STOP_SIGNAL = signal.SIGUSR1


class StopRequest:
    """Set once this rank has been asked to stop (a signal handler sets it; nothing else)."""

    def __init__(self) -> None:
        self.asked = False

    def install(self) -> StopRequest:
        signal.signal(STOP_SIGNAL, self._on_signal)
        return self

    def _on_signal(self, _signum: int, _frame: object) -> None:
        self.asked = True


class StopAgreement:
    """The ranks' common answer to "stop now?", one optimizer step behind the asking."""

    def __init__(self, request: StopRequest, world_size: int):
        self.request = request
        self.world_size = world_size
        # A group of the ranks' own over gloo: CPU tensors, whatever the job's backend.
        self.group = dist.new_group(backend="gloo") if world_size > 1 else None
        self._pending: tuple[torch.Tensor, dist.Work | None] | None = None

    def after_step(self) -> bool:
        """Called by every rank after every optimizer step: True when the ranks agreed to stop
        here (on the votes they cast at the step before)."""
        agreed = self._collect()
        self._pending = self._vote(async_op=True)
        return agreed

    def now(self) -> bool:
        """A vote settled at once (at an epoch's end): the pending one, and a fresh one."""
        agreed = self._collect()
        tensor, work = self._vote(async_op=False)
        return agreed or bool(tensor.item())

    def finish(self) -> None:
        """Collect the vote still in flight (the run is over)."""
        self._collect()

    def _collect(self) -> bool:
        if self._pending is None:
            return False
        tensor, work = self._pending
        self._pending = None
        if work is not None:
            work.wait()
        return bool(tensor.item())

    def _vote(self, async_op: bool) -> tuple[torch.Tensor, dist.Work | None]:
        tensor = torch.tensor([1 if self.request.asked else 0], dtype=torch.int32)
        if self.group is None:
            return tensor, None
        work = dist.all_reduce(tensor, op=dist.ReduceOp.MAX, group=self.group, async_op=async_op)
        return tensor, work


class ResumableSampler(DistributedSampler):
    """A DistributedSampler that can start `skip` samples into its epoch's shard: set before the
    epoch's loader iterator is made, and taken (then 0 again) by the iteration it starts. A loader
    without workers begins that iteration at its first batch, not when its iterator is made."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.skip = 0

    def __iter__(self) -> Iterator:
        skip, self.skip = self.skip, 0
        return islice(super().__iter__(), skip, None)

    def __len__(self) -> int:
        return max(0, super().__len__() - self.skip)
