"""The job_nodes table: which worker holds which node of a multi-node job's attempt."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from trainjobs.contract.clock import utcnow
from trainjobs.contract.states import ACTIVE_STATES
from trainjobs.jobs.tables import JobNodeRow, JobRow


def of_attempt(session: Session, job_id: str, attempt: int) -> list[JobNodeRow]:
    return list(
        session.scalars(
            select(JobNodeRow)
            .where(JobNodeRow.job_id == job_id, JobNodeRow.attempt == attempt)
            .order_by(JobNodeRow.node_rank)
        )
    )


def add(
    session: Session, job_id: str, attempt: int, node_rank: int, worker: str, address: str, lease_seconds: float
) -> None:
    session.add(
        JobNodeRow(
            job_id=job_id,
            attempt=attempt,
            node_rank=node_rank,
            worker=worker,
            address=address,
            lease_expires_at=utcnow() + timedelta(seconds=lease_seconds),
        )
    )
    session.flush()


def remove(
    session: Session, job_id: str, attempt: int, worker: str | None = None, expired_before: datetime | None = None
) -> int:
    """Members of an attempt leave: one worker's, or those whose lease ran out before a time."""
    statement = delete(JobNodeRow).where(JobNodeRow.job_id == job_id, JobNodeRow.attempt == attempt)
    if worker is not None:
        statement = statement.where(JobNodeRow.worker == worker)
    if expired_before is not None:
        statement = statement.where(JobNodeRow.lease_expires_at < expired_before)
    return int(session.execute(statement).rowcount)  # type: ignore[attr-defined]


def renew(session: Session, job_id: str, attempt: int, worker: str, lease_seconds: float) -> bool:
    result = session.execute(
        update(JobNodeRow)
        .where(JobNodeRow.job_id == job_id, JobNodeRow.attempt == attempt, JobNodeRow.worker == worker)
        .values(lease_expires_at=utcnow() + timedelta(seconds=lease_seconds))
        .execution_options(synchronize_session=False)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]


def expired_of_running(session: Session, now: datetime) -> list[tuple[str, int, str]]:
    """(job, attempt, worker) of members of running attempts whose lease ran out."""
    rows = session.execute(
        select(JobNodeRow.job_id, JobNodeRow.attempt, JobNodeRow.worker)
        .join(JobRow, (JobRow.id == JobNodeRow.job_id) & (JobRow.attempt == JobNodeRow.attempt))
        .where(JobRow.state.in_(ACTIVE_STATES), JobNodeRow.lease_expires_at < now)
    )
    return [(job_id, attempt, worker) for job_id, attempt, worker in rows]
