"""The retention sweep (`TRAINJOBS_RETENTION_DAYS`, off by default): ended jobs that finished
longer ago than that are deleted as `DELETE /v1/jobs/{id}` deletes them, a batch per pass, a
transaction per job. A job
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
from trainjobs.service import store_deletions
from trainjobs.store import CheckpointStore

log = logging.getLogger(__name__)

BATCH = 100


def delete_expired(
    sessions: sessionmaker[Session], store: CheckpointStore, retention_days: float, limit: int = BATCH
) -> int:
    """Delete up to `limit` expired jobs; returns how many. Each job's rows in a transaction of
    their own (on SQLite a big job's rows take about 150 ms to delete, and the write lock is held
    for that long: a hundred in one transaction held it for seconds), then its files."""
    cutoff = utcnow() - timedelta(days=retention_days)
    with transaction(sessions) as session:
        expired = [job.id for job in jobs.ended_before(session, cutoff, limit)]
    deleted = 0
    for job_id in expired:
        with transaction(sessions) as session:
            job = jobs.get(session, job_id)
            if job is None or job_rules.queued_starting_from(session, job):
                continue  # deleted meanwhile, or a queued job will start from it
            lifecycle.delete(session, job)
            store_deletions.record(session, [job_id], tree=True)
        store_deletions.delete_now(store, [job_id], tree=True)
        deleted += 1
    if deleted:
        log.info("retention: deleted %d job(s) that ended over %s days ago", deleted, retention_days)
    return deleted
