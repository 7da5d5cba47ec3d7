"""The fleet as a caller may see it: every worker, with only the caller's own job ids among
those it runs (an admin sees them all)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from trainjobs.contract.workers import WorkerStatus
from trainjobs.jobs.repositories import jobs
from trainjobs.service.auth import Principal


def visible_workers(session: Session, caller: Principal, workers: list[WorkerStatus]) -> list[WorkerStatus]:
    if caller.is_admin:
        return workers
    running = {job_id for worker in workers for job_id in worker.jobs}
    own = jobs.owned_by(session, caller.owner, running) if running else set()
    return [worker.model_copy(update={"jobs": [job for job in worker.jobs if job in own]}) for worker in workers]
