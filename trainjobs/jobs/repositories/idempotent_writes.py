"""Writes keyed by their primary key that can be repeated without harm, on both supported
dialects, safe under concurrent duplicates without read-then-write."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def _dialect(session: Session):
    return postgresql if session.get_bind().dialect.name == "postgresql" else sqlite


def insert_ignore(session: Session, table, values: dict[str, Any]) -> bool:
    """INSERT ... ON CONFLICT DO NOTHING; True when a row was inserted (the first write wins)."""
    # RETURNING, not rowcount: the driver may not report a row count for this statement.
    statement = (
        _dialect(session).insert(table).values(**values).on_conflict_do_nothing().returning(*table.primary_key.columns)
    )
    return session.execute(statement).first() is not None


def upsert(session: Session, table, values: dict[str, Any], only_where: Any = None) -> None:
    """INSERT ... ON CONFLICT (key) DO UPDATE: the last write wins (where the existing row
    matches `only_where`, if given; else it stays as it is)."""
    keys = [column.name for column in table.primary_key.columns]
    statement = _dialect(session).insert(table).values(**values)
    statement = statement.on_conflict_do_update(
        index_elements=keys,
        set_={name: statement.excluded[name] for name in values if name not in keys},
        where=only_where,
    )
    session.execute(statement)
