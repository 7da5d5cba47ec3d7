"""When a job's next attempt may start: not while the attempt it replaces may still be alive.

A job is requeued while its attempt's lease still runs when the preemption's grace ran out, when
one node of a multi-node job was lost while the others' leases run, or when the reaper finds the
job's lease out while a node's is not. A worker that loses its lease, or cannot renew it, kills
its launcher's process group before the lease runs out (trainjobs.worker.job_watch); until then
the requeued job keeps that lease's end as its `lease_expires_at` (`lease_owner` is cleared), and
neither the rule's next start for a worker nor a claim takes it. Two attempts of one job never
run at once.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from trainjobs.contract.clock import utcnow
from trainjobs.jobs.repositories import job_nodes
from trainjobs.jobs.tables import JobRow


def fence(session: Session, job: JobRow) -> datetime | None:
    """Until when the processes of the job's current attempt may live: the latest lease of the job
    and its nodes; None once that is past. Read before the attempt's node rows are removed."""
    leases = [node.lease_expires_at for node in job_nodes.of_attempt(session, job.id, job.attempt)]
    latest = max([lease for lease in (job.lease_expires_at, *leases) if lease is not None], default=None)
    return latest if latest is not None and latest > utcnow() else None


def can_start_now(job: JobRow) -> bool:
    """A queued job whose previous attempt is surely over (the claim's SQL says the same:
    trainjobs.jobs.repositories.jobs.claim)."""
    return job.lease_expires_at is None or job.lease_expires_at <= utcnow()
