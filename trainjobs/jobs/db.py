"""Engine and sessions.

SQLite gets WAL and a busy timeout (the API, its collector and local workers share the file),
and real transactions: pysqlite by default starts a transaction only at the first write, so a
read-modify-write (a job's event counter, say) could read a value another process changes before
the write. Here a write transaction starts with BEGIN IMMEDIATE, taking SQLite's write lock up
front; read-only work (`read_only=True`, the API's GET requests) starts with a plain BEGIN and,
under WAL, never waits for writers. PostgreSQL needs none of this: writers lock the job row
(SELECT ... FOR UPDATE).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker

if TYPE_CHECKING:
    from trainjobs.jobs.job_cache import JobCacheWriter

# More connections than the API's request threads (TRAINJOBS_API_THREADS, 8 by default) plus its
# background loop: a request must never wait for a connection, only for SQL.
POOL_SIZE, MAX_OVERFLOW = 20, 30


def _strict_json(value: object) -> str:
    """JSON columns hold JSON: a NaN or infinity fails the write (and with it only the
    transaction that tried) instead of storing a token that JSON readers refuse."""
    return json.dumps(value, allow_nan=False)


DEFAULT_TIMEOUT_SECONDS = 30.0


def make_engine(
    url: str, read_only: bool = False, timeout_seconds: float = DEFAULT_TIMEOUT_SECONDS, migrating: bool = False
) -> Engine:
    """An engine whose statements give up after `timeout_seconds` (SQLite: waiting for the write
    lock; PostgreSQL: opening a connection, and any one statement), and whose PostgreSQL
    connections are kept alive, so a half-open connection fails instead of hanging.

    `migrating`: SQLite's foreign keys are off, as Alembic's docs advise for batch operations:
    rebuilding a table with them on would cascade its deletes into every table that refers to it."""
    if url.startswith("sqlite"):
        engine = create_engine(
            url,
            connect_args={"check_same_thread": False, "timeout": timeout_seconds},
            pool_size=POOL_SIZE,
            max_overflow=MAX_OVERFLOW,
            json_serializer=_strict_json,
        )
        busy_ms, foreign_keys = int(timeout_seconds * 1000), "OFF" if migrating else "ON"
        event.listen(engine, "connect", lambda connection, _record: _sqlite_connect(connection, busy_ms, foreign_keys))
        begin = "BEGIN" if read_only else "BEGIN IMMEDIATE"
        event.listen(engine, "begin", lambda connection: connection.exec_driver_sql(begin))
        return engine
    postgres_options: dict[str, object] = {
        "connect_timeout": max(1, int(timeout_seconds)),
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 10,
        "keepalives_count": 3,
    }
    if not migrating:  # a migration of a big table may take longer than any one request
        postgres_options["options"] = f"-c statement_timeout={int(timeout_seconds * 1000)}"
    return create_engine(
        url,
        pool_pre_ping=True,
        pool_size=POOL_SIZE,
        max_overflow=MAX_OVERFLOW,
        json_serializer=_strict_json,
        connect_args=postgres_options,
    )


def _sqlite_connect(dbapi_connection, busy_ms: int, foreign_keys: str) -> None:
    dbapi_connection.isolation_level = None  # SQLAlchemy's "begin" event issues BEGIN itself
    cursor = dbapi_connection.cursor()
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute(f"PRAGMA busy_timeout={busy_ms}")
    cursor.execute(f"PRAGMA foreign_keys={foreign_keys}")
    cursor.close()


def make_session_factory(engine: Engine, job_cache: JobCacheWriter | None) -> sessionmaker[Session]:
    """Sessions on `engine`. `job_cache` publishes the job changes their transactions commit (the
    job cache that polls read, the notices that wake workers); None for sessions that never
    change a job (read-only requests, tokens), in which a job-life transition refuses to run."""
    sessions = sessionmaker(engine, expire_on_commit=False)
    if job_cache is not None:
        job_cache.attach(sessions)
    return sessions


@contextmanager
def transaction(sessions: sessionmaker[Session]) -> Iterator[Session]:
    """One unit of work: commit on success, roll back on any error."""
    with sessions() as session, session.begin():
        yield session


def on_commit(session: Session, callback: Callable[[], None]) -> None:
    """Run `callback` once the request's transaction has committed (see api.deps.db_session)."""
    session.info.setdefault("on_commit", []).append(callback)


def run_on_commit_callbacks(session: Session) -> None:
    for callback in session.info.pop("on_commit", []):
        callback()
