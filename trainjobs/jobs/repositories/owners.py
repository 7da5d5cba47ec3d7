"""The owners table: each owner's sharing settings (an owner without a row has the defaults)."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainjobs.jobs.tables import OwnerRow


def get(session: Session, owner: str) -> OwnerRow | None:
    return session.get(OwnerRow, owner)


def all_settings(session: Session) -> list[OwnerRow]:
    return list(session.scalars(select(OwnerRow).order_by(OwnerRow.owner)))


def put(session: Session, row: OwnerRow) -> OwnerRow:
    """Insert or replace an owner's row."""
    merged = session.merge(row)
    session.flush()
    return merged
