"""The checkpoints table, keyed by checkpoint id."""

from __future__ import annotations

from sqlalchemy import delete, select, update
from sqlalchemy.orm import Session

from trainjobs.contract.events import CheckpointRecord
from trainjobs.jobs.repositories.idempotent_writes import upsert
from trainjobs.jobs.tables import CheckpointRow


def record(session: Session, job_id: str, checkpoint: CheckpointRecord) -> None:
    """The file's latest write wins: a later attempt that re-runs an epoch rewrites its file (on
    cuda not always bit-identically), and the row must describe the file now on disk. A row
    never changes its job."""
    upsert(
        session,
        CheckpointRow.__table__,
        {
            "id": checkpoint.id,
            "job_id": job_id,
            "epoch": checkpoint.epoch,
            "step": checkpoint.step,
            "path": checkpoint.path,
            "size_bytes": checkpoint.size_bytes,
            "sha256": checkpoint.sha256,
            "is_best": checkpoint.is_best,
            "objective": checkpoint.objective,
            "created_at": checkpoint.created_at,
        },
        only_where=CheckpointRow.__table__.c.job_id == job_id,
    )


def mark_best(session: Session, job_id: str, checkpoint_id: str) -> None:
    session.execute(
        update(CheckpointRow)
        .where(CheckpointRow.job_id == job_id)
        .values(is_best=CheckpointRow.id == checkpoint_id)
        .execution_options(synchronize_session=False)
    )


def remove(session: Session, job_id: str, checkpoint_id: str) -> None:
    session.execute(delete(CheckpointRow).where(CheckpointRow.id == checkpoint_id, CheckpointRow.job_id == job_id))


def get(session: Session, checkpoint_id: str) -> CheckpointRow | None:
    return session.get(CheckpointRow, checkpoint_id)


def for_job(session: Session, job_id: str) -> list[CheckpointRow]:
    return list(
        session.scalars(
            select(CheckpointRow)
            .where(CheckpointRow.job_id == job_id)
            .order_by(CheckpointRow.epoch, CheckpointRow.step, CheckpointRow.id)
        )
    )


def latest_for_job(session: Session, job_id: str) -> CheckpointRow | None:
    """The furthest along: most epochs, then most steps into the next (a preemption's)."""
    return session.scalars(
        select(CheckpointRow)
        .where(CheckpointRow.job_id == job_id)
        .order_by(CheckpointRow.epoch.desc(), CheckpointRow.step.desc())
        .limit(1)
    ).one_or_none()
