"""Recovery and scheduling checks, run by the API's background loop:

- a running job whose lease ran out (its worker was lost) goes back to the queue with `attempt`
  + 1 and is dispatched again; the next worker resumes it from its last checkpoint. After
  `max_attempts` it fails instead, saying why. A job lost while cancelling is cancelled.
- a job lost while it was being preempted goes back to the queue as a preempted job (it resumes
  from its last checkpoint; a preemption never counts towards giving up).

Waiting reasons are the sharing rule's (service.sharing).
"""

from __future__ import annotations

import logging

from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.clock import utcnow
from trainjobs.contract.events import StateChange
from trainjobs.contract.states import ACTIVE_STATES
from trainjobs.jobs import lifecycle
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import job_nodes, jobs

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
            elif job.state == "preempting":  # lost while it checkpointed: it was leaving anyway
                lifecycle.preempted(session, job, f"worker {lost} was lost; it resumes from its last checkpoint")
            else:
                lifecycle.requeue_or_give_up(session, job, f"worker {lost} was lost", max_attempts)
            log.warning("job %s: lease of worker %s expired; now %s (attempt %d)", job.id, lost, job.state, job.attempt)
