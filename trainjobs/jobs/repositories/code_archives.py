"""The code_archives table: which owner uploaded which archive."""

from __future__ import annotations

from sqlalchemy import delete, exists, select
from sqlalchemy.orm import Session

from trainjobs.jobs.tables import CodeArchiveRow


def get(session: Session, owner: str, code: str) -> CodeArchiveRow | None:
    return session.get(CodeArchiveRow, (owner, code))


def add(session: Session, row: CodeArchiveRow) -> None:
    session.add(row)
    session.flush()


def remove(session: Session, owner: str, code: str) -> None:
    session.execute(delete(CodeArchiveRow).where(CodeArchiveRow.owner == owner, CodeArchiveRow.id == code))


def held_by_anyone(session: Session, code: str) -> bool:
    """Whether any owner still has this archive (its bytes in the store are shared)."""
    return bool(session.scalar(select(exists().where(CodeArchiveRow.id == code))))
