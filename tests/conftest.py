from __future__ import annotations

import secrets
import warnings

import pytest
from fastapi.testclient import TestClient

from devstack import REDIS_URL, Stack, clear_namespace, new_token, sql_database
from trainjobs.settings import Settings

pytest_plugins = ["tests.lanes"]  # --lane check|test|chaos


@pytest.fixture(params=["sqlite", "postgresql"])
def database_url(request, tmp_path):
    """A fresh migrated database; every test that takes it runs on SQLite and on PostgreSQL."""
    with sql_database(request.param, tmp_path) as url:
        yield url


@pytest.fixture
def sqlite_url(tmp_path):
    with sql_database("sqlite", tmp_path) as url:
        yield url


@pytest.fixture
def namespace():
    name = f"tjtest-{secrets.token_hex(4)}"
    yield name
    clear_namespace(REDIS_URL, name)


@pytest.fixture
def settings(tmp_path, database_url, namespace) -> Settings:
    return Settings(
        home=tmp_path, database_url=database_url, redis_url=REDIS_URL, namespace=namespace, run_background=False
    )


@pytest.fixture
def writer_sessions(settings):
    """Sessions as a worker's, the collector's or the reaper's are made: their job changes reach
    the API's job cache (service/job_cache.py)."""
    from trainjobs.connections import redis_client
    from trainjobs.jobs.db import make_engine, make_session_factory
    from trainjobs.jobs.job_cache import JobCacheWriter

    engine = make_engine(settings.sql_url)
    client = redis_client(settings)
    sessions = make_session_factory(engine, JobCacheWriter(client, settings.keys))
    yield sessions
    client.close()
    engine.dispose()


@pytest.fixture
def api(settings) -> TestClient:
    """The real app on the real SQL and Redis, in-process (no background loop)."""
    from trainjobs.service.api.app import create_app

    with TestClient(create_app(settings)) as client:
        yield client


@pytest.fixture
def alice(settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {new_token(settings.sql_url, 'alice')}"}


@pytest.fixture
def bob(settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {new_token(settings.sql_url, 'bob')}"}


@pytest.fixture
def stack_on(tmp_path):
    """Start a real API + worker on a given database URL; stopped after the test."""
    stacks: list[Stack] = []

    def start(database_url: str, redis_url: str = REDIS_URL, with_worker: bool = True, **env) -> Stack:
        stack = Stack(tmp_path / f"stack{len(stacks)}", database_url, redis_url, **env)
        stacks.append(stack)
        return stack.start() if with_worker else stack.start_api_only()

    yield start
    for stack in stacks:
        stack.stop()


@pytest.fixture(scope="session")
def moto_s3():
    from devstack import MotoS3

    server = MotoS3().start()
    yield server
    server.stop()


@pytest.fixture
def s3_server(moto_s3):
    """The session's moto server, started again (with a warning saying how it ended) if it died."""
    if reason := moto_s3.restarted_because():
        warnings.warn(reason, stacklevel=1)
    return moto_s3


@pytest.fixture(scope="session")
def plugin_installed():
    """tests/plugin_package, installed into this environment: a model and datasets that come
    through entry points."""
    import subprocess
    import sys
    from pathlib import Path

    package = Path(__file__).resolve().parent / "plugin_package"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            str(package),
        ],
        check=True,
    )
    from trainjobs.contract import catalog

    catalog.models.cache_clear()
    catalog.datasets.cache_clear()


@pytest.fixture(scope="session")
def own_task_installed():
    """examples/own-task installed into this environment as a plugin: the regression ("regressor"
    on "linear-targets") and the masked sequence model ("token-model" on "masked-sequences")."""
    import subprocess
    import sys

    from devstack import OWN_TASK_PROJECT

    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*command, str(OWN_TASK_PROJECT)], check=True)
    from trainjobs.contract import catalog

    catalog.models.cache_clear()
    catalog.datasets.cache_clear()


@pytest.fixture(scope="session")
def example_installed():
    """examples/own-model installed into this environment as a plugin (its entry points): the
    same model and dataset a code archive of that folder holds."""
    import subprocess
    import sys

    from devstack import EXAMPLE_PROJECT

    command = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--no-build-isolation", "--no-index"]
    subprocess.run([*command, str(EXAMPLE_PROJECT)], check=True)
    from trainjobs.contract import catalog

    catalog.models.cache_clear()
    catalog.datasets.cache_clear()
