"""Recovery and scheduling checks, run by the API's background loop:

- a running job whose lease ran out (its worker was lost) goes back to the queue with `attempt`
  + 1 and is dispatched again; the next worker resumes it from its last checkpoint. After
  `max_attempts` it fails instead, saying why. A job lost while cancelling is cancelled.
- a queued job that no live worker can take says why in `waiting_reason`; once one can, the
  reason is cleared and the job dispatched again (a worker that could not take it dropped its
  message).
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.clock import utcnow
from trainjobs.contract.events import StateChange
from trainjobs.contract.spec import devices_per_node
from trainjobs.contract.states import ACTIVE_STATES
from trainjobs.contract.workers import WorkerStatus
from trainjobs.jobs import lifecycle
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import job_nodes, jobs
from trainjobs.jobs.scheduling import waiting_reason

log = logging.getLogger(__name__)


def requeue_lost_jobs(sessions: sessionmaker[Session], max_attempts: int) -> None:
    with transaction(sessions) as session:
        lost_workers = {job.id: job.lease_owner or job.worker for job in jobs.with_expired_lease(session, utcnow())}
        # A multi-node job is lost with any one of its nodes' workers.
        for job_id, _attempt, worker in job_nodes.expired_of_running(session, utcnow()):
            lost_workers.setdefault(job_id, worker)
        for job_id, lost in lost_workers.items():
            job = jobs.get(session, job_id, for_update=True)
            if job is None or job.state not in ACTIVE_STATES:
                continue
            if job.state == "cancelling":
                lifecycle.finish(session, job, job.attempt, StateChange(state="cancelled", stop_reason="cancelled"))
            else:
                lifecycle.requeue_or_give_up(session, job, f"worker {lost} was lost", max_attempts)
            log.warning("job %s: lease of worker %s expired; now %s (attempt %d)", job.id, lost, job.state, job.attempt)


EXPLAIN_BATCH = 500  # the most waiting reasons one pass writes


def explain_waiting_jobs(
    sessions: sessionmaker[Session], workers: list[WorkerStatus], limit: int = EXPLAIN_BATCH
) -> int:
    """Give queued jobs the waiting reason the fleet implies, at most `limit` of them; return how
    many changed (`limit` means: call again, more may be due).

    The reason depends only on a job's (device type, devices needed), so SQL finds the few such
    pairs and then only the jobs whose reason differs: with the fleet unchanged a pass reads no
    job at all, however long the queue. A fleet change that touches a long queue is written a
    batch per pass, so it never holds SQL's write lock (SQLite has one for the whole file) or the
    background thread (which also runs the collector) for long.
    """
    with transaction(sessions) as session:
        demand = jobs.queued_demand(session)
    changed = 0
    for asked in demand:
        if changed >= limit:
            break
        needed = devices_per_node(asked.gpus, asked.nodes)
        reason = waiting_reason(asked.device, needed, workers, asked.nodes, asked.own_code)
        with transaction(sessions) as session:
            stale = jobs.queued_with_other_reason(session, asked, reason, limit=limit - changed)
            for job in stale:
                lifecycle.explain_waiting(session, job, reason)
        changed += len(stale)
    return changed
