"""Dispatch with an outbox: the job and its dispatch intent are written in one transaction;
the Celery message is sent only after the commit, and the intent deleted once it is sent.

If Redis is down at that moment, or the process dies between commit and send, the intent stays
and the sweeper sends it later. A message may therefore be sent twice; the worker's atomic claim
makes the second one a no-op.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from trainjobs.connections import celery_app
from trainjobs.contract.clock import utcnow
from trainjobs.contract.dispatch import RUN_JOB_TASK
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import dispatch_intents
from trainjobs.settings import Settings

log = logging.getLogger(__name__)


class Dispatcher:
    def __init__(self, settings: Settings, sessions: sessionmaker[Session]):
        self.keys = settings.keys
        self.sessions = sessions
        self.celery = celery_app("trainjobs-api", settings)

    def send(self, job_id: str, device: str) -> bool:
        """Publish the run message; False (logged) when the broker cannot take it now."""
        try:
            self.celery.send_task(RUN_JOB_TASK, args=[job_id], queue=self.keys.run_queue(device), retry=False)
        except Exception as error:  # kombu raises several types for a broker that is away
            log.warning("dispatch of job %s deferred: broker unavailable (%s)", job_id, error)
            return False
        return True

    def send_committed(self, job_id: str, device: str) -> None:
        """Called once the job's transaction committed: send, then clear the intent."""
        if self.send(job_id, device):
            with transaction(self.sessions) as session:
                dispatch_intents.remove(session, job_id)


def sweep(dispatcher: Dispatcher, grace_seconds: float) -> int:
    """Send the intents that their request did not (older than the grace period); return how many."""
    with transaction(dispatcher.sessions) as session:
        due = [
            (intent.job_id, intent.device)
            for intent in dispatch_intents.due(session, utcnow() - timedelta(seconds=grace_seconds))
        ]
    sent = 0
    for job_id, device in due:
        if not dispatcher.send(job_id, device):
            break
        with transaction(dispatcher.sessions) as session:
            dispatch_intents.remove(session, job_id)
        sent += 1
        log.info("sweeper dispatched job %s", job_id)
    return sent
