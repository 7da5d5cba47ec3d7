"""The services a stack runs on: SQL (a fresh, migrated SQLite file or PostgreSQL database),
Redis (the one at $TRAINJOBS_TEST_REDIS_URL, a namespace per stack), and small helpers."""

from __future__ import annotations

import atexit
import contextlib
import os
import secrets
import shutil
import socket
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path

import psycopg
import redis
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.redis_keys import RedisKeys
from trainjobs.jobs.db import make_engine, make_session_factory, transaction
from trainjobs.jobs.job_cache import JobCacheWriter
from trainjobs.service.auth import create_token
from trainjobs.service.migrate import upgrade_to_head

REDIS_URL = os.environ.get("TRAINJOBS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("TRAINJOBS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@contextmanager
def sql_database(kind: str, tmp_path: Path):
    """Yield the URL of a new, migrated database of `kind` ("sqlite" or "postgresql"): a copy of a
    template this process migrated once (migrating each one took 0.6 s on PostgreSQL, and the
    suite makes hundreds)."""
    if kind == "sqlite":
        shutil.copyfile(_migrated_templates.sqlite(), tmp_path / "trainjobs.db")
        yield f"sqlite:///{tmp_path / 'trainjobs.db'}"
        return
    name = f"trainjobs_test_{secrets.token_hex(6)}"
    with psycopg.connect(_admin_dsn(), autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}" TEMPLATE "{_migrated_templates.postgresql()}"')
    try:
        yield make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False)
    finally:
        with psycopg.connect(_admin_dsn(), autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _admin_dsn() -> str:
    return make_url(POSTGRES_URL).set(drivername="postgresql").render_as_string(hide_password=False)


class _MigratedTemplates:
    """One migrated database of each kind per process (pytest-xdist's workers each have theirs),
    made when first asked for; the PostgreSQL one is dropped when the process exits."""

    def __init__(self) -> None:
        self._sqlite: Path | None = None
        self._postgresql: str | None = None

    def sqlite(self) -> Path:
        if self._sqlite is None:
            path = Path(tempfile.mkdtemp(prefix="trainjobs-template-")) / "trainjobs.db"
            upgrade_to_head(f"sqlite:///{path}")
            atexit.register(shutil.rmtree, path.parent, True)
            self._sqlite = path
        return self._sqlite

    def postgresql(self) -> str:
        if self._postgresql is None:
            name = f"trainjobs_template_{os.getpid()}_{secrets.token_hex(3)}"
            with psycopg.connect(_admin_dsn(), autocommit=True) as connection:
                connection.execute(f'CREATE DATABASE "{name}"')
            upgrade_to_head(make_url(POSTGRES_URL).set(database=name).render_as_string(hide_password=False))
            atexit.register(_drop_database, name)
            self._postgresql = name
        return self._postgresql


def _drop_database(name: str) -> None:
    with contextlib.suppress(psycopg.Error), psycopg.connect(_admin_dsn(), autocommit=True) as connection:
        connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_migrated_templates = _MigratedTemplates()


def new_token(database_url: str, owner: str, admin: bool = False) -> str:
    engine = make_engine(database_url)
    try:
        with transaction(make_session_factory(engine, job_cache=None)) as session:
            return create_token(session, owner, admin)
    finally:
        engine.dispose()


def job_sessions(database_url: str, namespace: str, redis_url: str = REDIS_URL) -> sessionmaker[Session]:
    """Sessions as a worker's, the collector's or the reaper's are made: the job changes they
    commit reach the job cache and the workers' notices in `namespace`."""
    client = redis.Redis.from_url(redis_url, socket_timeout=10, socket_connect_timeout=5)
    return make_session_factory(make_engine(database_url), JobCacheWriter(client, RedisKeys(namespace)))


def clear_namespace(redis_url: str, namespace: str) -> None:
    # Bounded: a teardown never waits on a Redis that is gone for longer than this.
    client = redis.Redis.from_url(redis_url, socket_connect_timeout=5, socket_timeout=5)
    try:
        keys = list(client.scan_iter(f"{namespace}*"))
        if keys:
            client.delete(*keys)
    except redis.ConnectionError:
        pass  # a test's private Redis, already stopped
    finally:
        client.close()
