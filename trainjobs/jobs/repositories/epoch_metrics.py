"""The epoch_metrics table: one row per (job, epoch), written once."""

from __future__ import annotations

from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainjobs.contract.clock import utcnow
from trainjobs.jobs.repositories.idempotent_writes import insert_ignore
from trainjobs.jobs.tables import EpochMetricsRow


def record(session: Session, job_id: str, epoch: int, attempt: int, data: dict[str, Any]) -> bool:
    """Store an epoch's metrics unless that epoch is stored already; True when it was new."""
    return insert_ignore(
        session,
        EpochMetricsRow.__table__,
        {
            "job_id": job_id,
            "epoch": epoch,
            "attempt": attempt,
            "data": data,
            "created_at": utcnow(),
        },
    )


def for_job(session: Session, job_id: str) -> list[EpochMetricsRow]:
    return list(
        session.scalars(select(EpochMetricsRow).where(EpochMetricsRow.job_id == job_id).order_by(EpochMetricsRow.epoch))
    )
