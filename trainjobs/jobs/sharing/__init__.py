"""Sharing the fleet: in what order queued jobs start, where, and which running jobs are preempted
for whom. Pure functions over plain values: no I/O, no clock but `Rules.now`, the same answer for
the same input. The worker that takes a job, the API leader's sweep (preemptions and waiting
reasons) and `GET /v1/queue` all call `decide`, so the order the queue shows is the order jobs
start in, and a job's `waiting_reason` says the rule that holds it.

Each device type is shared on its own; its capacity is the slots of its live workers. An owner's
fair share is capacity x weight / the weights of every owner with a queued or running job of
that type (contract, "Sharing the fleet").

**Order.** Higher priority first; then the owner whose devices in use / weight is lowest, counting
the jobs placed before in this order; then the oldest. Per priority level, each owner's jobs wait
in a first-come list and the owners in a heap keyed by (in use / weight, their oldest job), so a
decision over n queued jobs of k owners costs O(n log k).

**Placement.** In that order, a job starts on the workers with the fewest free devices that hold
it (keeping large holes for large jobs), unless its owner would pass `max_devices`. A job that
does not fit now does not hold back smaller jobs behind it on other workers, but it reserves the
workers it would use (the ones with most devices free): their free devices go to nobody behind it,
so a stream of small jobs cannot starve it.

**Preemption.** A job that does not fit may take devices from running jobs that are preemptible
and have run `min_runtime_seconds`: of lower priority; or, at equal priority, of an owner above
their share, when the job's owner is still at or below their share once it starts. Victims in
order: the owner furthest above their share, then the lowest priority, then the most recently
started, then the id; as few as free the devices (no victim chosen can be spared). A job whose
victims are still checkpointing waits for them and preempts no more.

Why preemption cannot loop: at equal priority, a job preempts only while its owner stays within
their share, and only an owner above theirs loses devices; so no owner can take back what it lost,
and each preemption moves devices from an owner above share to one that ends at or below it. At
most sum over owners of (devices above share) / (smallest job's devices) preemptions happen at
equal priority while the set of active owners and the capacity stay the same; none happens before
a victim's `min_runtime_seconds`. Priority preemption only ever goes downwards.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from trainjobs.jobs.sharing.fleet import Fleet, start_order
from trainjobs.jobs.sharing.placing import Placing
from trainjobs.jobs.sharing.values import (
    DEFAULT_MAX_PRIORITY,
    DEFAULT_WEIGHT,
    Decision,
    Host,
    OwnerSettings,
    OwnerView,
    Preemption,
    QueuedJob,
    Rules,
    RunningJob,
    Start,
)

__all__ = [
    "DEFAULT_MAX_PRIORITY",
    "DEFAULT_WEIGHT",
    "Decision",
    "Host",
    "OwnerSettings",
    "OwnerView",
    "Preemption",
    "QueuedJob",
    "RunningJob",
    "Rules",
    "Start",
    "decide",
    "start_order",
]


def decide(
    device: str,
    hosts: Sequence[Host],
    running: Sequence[RunningJob],
    queued: Sequence[QueuedJob],
    owners: Mapping[str, OwnerSettings],
    rules: Rules,
    explain: bool = True,
) -> Decision:
    """The decision for one device type, over its live workers (`hosts`), its running jobs (and
    those being preempted, which hold their devices until they stop) and its queued jobs.

    `explain=False` (a worker choosing its job, the leader choosing victims): stop once nothing
    more can start or be preempted; `order` and `reasons` then cover the jobs looked at only."""
    fleet = Fleet(device, hosts, running, queued, owners)
    placing = Placing(fleet, rules)
    order = []
    for job in start_order(queued, fleet.in_use, fleet.weight):
        order.append(job)
        placing.place(job)
        if not explain and placing.settled(job.priority):
            break
    return Decision(
        order=tuple(job.id for job in order),
        starts=tuple(placing.starts),
        preemptions=tuple(placing.preemptions),
        reasons=placing.reasons,
        owners=fleet.views(),
    )
