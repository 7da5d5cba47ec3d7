"""INSERT ... ON CONFLICT DO NOTHING on both supported dialects: idempotent writes keyed by
their primary key, safe under concurrent duplicates without read-then-write."""

from __future__ import annotations

from typing import Any

from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session


def insert_ignore(session: Session, table, values: dict[str, Any]) -> bool:
    """Insert unless the key exists; True when a row was inserted."""
    dialect = postgresql if session.get_bind().dialect.name == "postgresql" else sqlite
    # RETURNING, not rowcount: the driver may not report a row count for this statement.
    statement = dialect.insert(table).values(**values).on_conflict_do_nothing().returning(*table.primary_key.columns)
    return session.execute(statement).first() is not None
