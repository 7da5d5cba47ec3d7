"""The job_events table: each job's events numbered 1, 2, 3... under the job row's lock."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainjobs.contract.clock import utcnow
from trainjobs.jobs.tables import JobEventRow, JobRow


def append(session: Session, job: JobRow, kind: str, data: dict[str, Any]) -> int:
    """The caller holds the job row locked (or created it in this transaction)."""
    job.event_seq = (job.event_seq or 0) + 1
    session.add(JobEventRow(job_id=job.id, seq=job.event_seq, kind=kind, data=data, created_at=utcnow()))
    return job.event_seq


def after(session: Session, job_id: str, seq: int, limit: int = 200) -> list[JobEventRow]:
    return list(
        session.scalars(
            select(JobEventRow)
            .where(JobEventRow.job_id == job_id, JobEventRow.seq > seq)
            .order_by(JobEventRow.seq)
            .limit(limit)
        )
    )
