"""The worker's Celery app (worker/celery_app.py), as a real worker process runs it."""

from __future__ import annotations

import time

import pytest
import redis

from devstack import PrivateRedis

pytestmark = pytest.mark.e2e


@pytest.fixture
def private_redis(tmp_path):
    """Requested before `stack_on`, so that it outlives the stack (whose teardown clears keys there)."""
    broker = PrivateRedis(tmp_path / "redis")
    (tmp_path / "redis").mkdir()
    broker.start()
    yield broker
    broker.stop()


def published(client: redis.Redis) -> int:
    return int(client.info("commandstats").get("cmdstat_publish", {}).get("calls", 0))


def test_an_idle_worker_publishes_nothing(private_redis, stack_on, sqlite_url):
    """Celery's own heartbeat (an event every 2 s, for monitors nothing here runs) is off: while a
    job trains, each publish would wake the worker and Redis on a core that a rank needs."""
    stack_on(sqlite_url, redis_url=private_redis.url)
    client = redis.Redis.from_url(private_redis.url)
    time.sleep(2)  # the worker's start-up is over
    before = published(client)
    time.sleep(6)
    assert published(client) == before
