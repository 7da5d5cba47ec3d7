"""Whether any live worker could ever hold a job, as pure functions over plain values: the worker
(which drops a message it can never run) and the sharing rule (trainjobs.jobs.sharing, whose
waiting reasons start here) share these, so a reason reads the same whoever wrote it. Which job
starts, and where, is the sharing rule's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from trainjobs.contract.workers import WorkerStatus


@dataclass(frozen=True)
class QueuedJob:
    id: str
    device: str  # "cuda" or "cpu"
    needed: int  # devices it leases on each node: gpus / nodes (DataParallel drives every GPU of one rank)
    nodes: int = 1  # workers it spans
    own_code: bool = False  # it runs its own code: only a worker with a sandbox takes it


def waiting_reason(
    device: str, needed: int, workers: Sequence[WorkerStatus], nodes: int = 1, own_code: bool = False
) -> str | None:
    """Why a job needing `needed` devices of `device` on each of `nodes` workers cannot run on
    the live `workers` (with `own_code`: on those that can sandbox it); None when enough of them
    own enough devices (they may be busy now: that is a wait, not a reason)."""
    capacities = [(worker.slots, worker.sandbox) for worker in workers if worker.device == device]
    return never_fits(device, needed, capacities, nodes, own_code)


def never_fits(
    device: str, needed: int, capacities: Sequence[tuple[int, bool]], nodes: int = 1, own_code: bool = False
) -> str | None:
    """The same, given each live worker of the type as (slots, can sandbox)."""
    if not capacities:
        return f"no live {device} worker"
    if own_code:
        capacities = [(slots, sandbox) for slots, sandbox in capacities if sandbox]
        if not capacities:
            return f"no live {device} worker can run a job's own code (its sandbox tool, bubblewrap, is missing there)"
    largest = max(slots for slots, _ in capacities)
    if largest < needed:
        return f"needs {needed} {device} devices; the largest live {device} worker has {largest}"
    big_enough = sum(slots >= needed for slots, _ in capacities)
    if big_enough < nodes:
        holders = (
            f"{big_enough} live {device} worker has" if big_enough == 1 else f"{big_enough} live {device} workers have"
        )
        return f"needs {nodes} {device} workers with {needed} devices each; {holders} that many"
    return None
