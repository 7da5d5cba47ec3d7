"""The store_deletions table: checkpoint store paths to delete (service.store_deletions)."""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import delete, select
from sqlalchemy.orm import Session

from trainjobs.contract.clock import utcnow
from trainjobs.jobs.tables import StoreDeletionRow


def add(session: Session, path: str, tree: bool, first_try_in: timedelta) -> None:
    now = utcnow()
    session.add(StoreDeletionRow(path=path, tree=tree, tries=0, next_try_at=now + first_try_in, created_at=now))


def due(session: Session, now: datetime, limit: int) -> list[StoreDeletionRow]:
    query = select(StoreDeletionRow).where(StoreDeletionRow.next_try_at <= now)
    return list(session.scalars(query.order_by(StoreDeletionRow.next_try_at).limit(limit)))


def done(session: Session, deletion_id: int) -> None:
    session.execute(delete(StoreDeletionRow).where(StoreDeletionRow.id == deletion_id))


def failed(session: Session, deletion_id: int, next_try_at: datetime) -> None:
    row = session.get(StoreDeletionRow, deletion_id, with_for_update=True)
    if row is not None:
        row.tries += 1
        row.next_try_at = next_try_at


def pending(session: Session) -> list[StoreDeletionRow]:
    return list(session.scalars(select(StoreDeletionRow).order_by(StoreDeletionRow.id)))
