"""The dispatch_intents table (the outbox)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from trainjobs.contract.clock import utcnow
from trainjobs.jobs.tables import DispatchIntentRow


def add(session: Session, job_id: str, device: str) -> None:
    """A job to dispatch; one intent a job, so a job that still has one keeps it."""
    if not exists(session, job_id):
        session.add(DispatchIntentRow(job_id=job_id, device=device, created_at=utcnow()))


def due(session: Session, created_before: datetime, limit: int = 100) -> list[DispatchIntentRow]:
    return list(
        session.scalars(
            select(DispatchIntentRow)
            .where(DispatchIntentRow.created_at < created_before)
            .order_by(DispatchIntentRow.created_at)
            .limit(limit)
        )
    )


def remove(session: Session, job_id: str) -> None:
    session.execute(delete(DispatchIntentRow).where(DispatchIntentRow.job_id == job_id))


def exists(session: Session, job_id: str) -> bool:
    return session.get(DispatchIntentRow, job_id) is not None
