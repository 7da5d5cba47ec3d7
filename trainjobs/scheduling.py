"""The scheduling rule, as pure functions over plain values.

Which queued job a worker starts, and whether any live worker could ever hold a job. The worker
(which picks a job) and the service's waiting-reason sweep (which explains why a job waits) both
use these, so a job's `waiting_reason` reads the same whoever wrote it.

First come, first served within a device type: a worker starts the oldest queued job it could
ever hold, which is the message's own job unless an older one waits. While that one does not
fit the free devices, nothing younger starts there. Without this, a stream of 1-device jobs keeps
every worker partly busy and a 2-device job never runs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from trainjobs.contract.workers import WorkerStatus


@dataclass(frozen=True)
class QueuedJob:
    id: str
    device: str  # "cuda" or "cpu"
    needed: int  # devices it leases: `gpus` (DataParallel runs one rank but drives every GPU)


def first_in_line(job: QueuedJob, older: Iterable[QueuedJob], slots: int) -> QueuedJob:
    """The job a worker with `slots` devices runs for a message about `job`: the oldest of
    `older` (queued before `job`, oldest first) that it could ever hold, else `job` itself."""
    return next((candidate for candidate in older if candidate.needed <= slots), job)


def waiting_reason(device: str, needed: int, workers: Sequence[WorkerStatus]) -> str | None:
    """Why a job needing `needed` devices of `device` cannot run on the live `workers`; None
    when one of them owns enough devices (it may be busy now: that is a wait, not a reason)."""
    same_kind = [worker for worker in workers if worker.device == device]
    if not same_kind:
        return f"no live {device} worker"
    largest = max(worker.slots for worker in same_kind)
    if largest < needed:
        return f"needs {needed} {device} devices; the largest live {device} worker has {largest}"
    return None
