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
    needed: int  # devices it leases on each node: gpus / nodes (DataParallel drives every GPU of one rank)
    nodes: int = 1  # workers it spans
    own_code: bool = False  # it runs its own code: only a worker with a sandbox takes it


def first_in_line(
    job: QueuedJob, older: Iterable[QueuedJob], slots: int, workers: Sequence[WorkerStatus] = (), sandbox: bool = True
) -> QueuedJob:
    """The job a worker with `slots` devices runs for a message about `job`: the oldest of
    `older` (queued before `job`, oldest first) that it could ever hold, else `job` itself (a job
    with its own code only where the worker has a `sandbox`). A multi-node job counts only while
    enough live `workers` could hold its nodes: one that cannot gather them blocks nothing."""

    def could_run(candidate: QueuedJob) -> bool:
        if candidate.needed > slots or (candidate.own_code and not sandbox):
            return False
        return (
            candidate.nodes == 1
            or waiting_reason(candidate.device, candidate.needed, workers, candidate.nodes, candidate.own_code) is None
        )

    return next((candidate for candidate in older if could_run(candidate)), job)


def waiting_reason(
    device: str, needed: int, workers: Sequence[WorkerStatus], nodes: int = 1, own_code: bool = False
) -> str | None:
    """Why a job needing `needed` devices of `device` on each of `nodes` workers cannot run on
    the live `workers` (with `own_code`: on those that can sandbox it); None when enough of them
    own enough devices (they may be busy now: that is a wait, not a reason)."""
    same_kind = [worker for worker in workers if worker.device == device]
    if not same_kind:
        return f"no live {device} worker"
    if own_code:
        same_kind = [worker for worker in same_kind if worker.sandbox]
        if not same_kind:
            return f"no live {device} worker can run a job's own code (its sandbox tool, bubblewrap, is missing there)"
    largest = max(worker.slots for worker in same_kind)
    if largest < needed:
        return f"needs {needed} {device} devices; the largest live {device} worker has {largest}"
    big_enough = sum(worker.slots >= needed for worker in same_kind)
    if big_enough < nodes:
        holders = (
            f"{big_enough} live {device} worker has" if big_enough == 1 else f"{big_enough} live {device} workers have"
        )
        return f"needs {nodes} {device} workers with {needed} devices each; {holders} that many"
    return None
