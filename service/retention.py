"""The retention sweep (`TRAINJOBS_RETENTION_DAYS`, off by default): ended jobs that finished
longer ago than that are deleted as `DELETE /v1/jobs/{id}` deletes them, a batch per pass. A job
that a queued job will start from is kept until that one has started."""

from __future__ import annotations

import logging
from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.clock import utcnow
from trainjobs.jobs import lifecycle
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import jobs
from trainjobs.service import jobs as job_rules
from trainjobs.store import CheckpointStore

log = logging.getLogger(__name__)

BATCH = 100


def delete_expired(
    sessions: sessionmaker[Session], store: CheckpointStore, retention_days: float, limit: int = BATCH
) -> int:
    """Delete up to `limit` expired jobs; returns how many. Rows in one transaction, then files."""
    cutoff = utcnow() - timedelta(days=retention_days)
    deleted: list[str] = []
    with transaction(sessions) as session:
        for job in jobs.ended_before(session, cutoff, limit):
            if job_rules.queued_starting_from(session, job):
                continue
            deleted.append(job.id)
            lifecycle.delete(session, job)
    for job_id in deleted:
        job_rules.remove_files(store, job_id)
    if deleted:
        log.info("retention: deleted %d job(s) that ended over %s days ago", len(deleted), retention_days)
    return len(deleted)
