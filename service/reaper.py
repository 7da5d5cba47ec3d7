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

from service import timeline
from service.db import transaction
from service.repositories import dispatch_intents, jobs
from service.tables import utcnow
from trainjobs.contract.workers import WorkerStatus

log = logging.getLogger(__name__)


def requeue_lost_jobs(sessions: sessionmaker[Session], max_attempts: int) -> list[str]:
    requeued = []
    with transaction(sessions) as session:
        for job in jobs.with_expired_lease(session, utcnow()):
            lost = job.lease_owner or job.worker
            if job.state == "cancelling":
                jobs.touch(job, state="cancelled", stop_reason="cancelled", finished_at=utcnow(),
                           lease_owner=None, lease_expires_at=None)
            elif job.attempt >= max_attempts:
                jobs.touch(job, state="failed", stop_reason="error", finished_at=utcnow(),
                           lease_owner=None, lease_expires_at=None,
                           error=f"worker {lost} was lost; gave up after {job.attempt} "
                                 f"attempt{'s' if job.attempt > 1 else ''}")
            else:
                jobs.touch(job, state="queued", attempt=job.attempt + 1, worker=None, lease_owner=None,
                           lease_expires_at=None, waiting_reason=f"requeued: worker {lost} was lost")
                dispatch_intents.add(session, job.id, job.device)
                requeued.append(job.id)
            timeline.state_changed(session, job)
            log.warning("job %s: lease of worker %s expired; now %s (attempt %d)", job.id, lost, job.state, job.attempt)
    return requeued


EXPLAIN_BATCH = 500   # the most waiting reasons one pass writes


def explain_waiting_jobs(sessions: sessionmaker[Session], workers: list[WorkerStatus],
                         limit: int = EXPLAIN_BATCH) -> int:
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
    for device, needed in demand:
        if changed >= limit:
            break
        reason = waiting_reason(device, needed, workers)
        with transaction(sessions) as session:
            stale = jobs.queued_with_other_reason(session, device, needed, reason, limit=limit - changed)
            for job in stale:
                jobs.touch(job, waiting_reason=reason)
                if reason is None and not dispatch_intents.exists(session, job.id):
                    # It was waiting and a live worker can take it now. The message may have
                    # been dropped by a worker too small for it: send another (a duplicate
                    # claims nothing).
                    dispatch_intents.add(session, job.id, job.device)
                timeline.state_changed(session, job)
        changed += len(stale)
    return changed


def waiting_reason(device: str, needed: int, workers: list[WorkerStatus]) -> str | None:
    """None when some live worker of the device type owns enough devices."""
    same_kind = [worker for worker in workers if worker.device == device]
    if not same_kind:
        return f"no live {device} worker"
    largest = max(worker.slots for worker in same_kind)
    if largest < needed:
        return f"needs {needed} {device} devices; the largest live {device} worker has {largest}"
    return None
