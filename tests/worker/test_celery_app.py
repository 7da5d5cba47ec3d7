"""The worker's Celery app (worker/celery_app.py), as a real worker process runs it."""

from __future__ import annotations

import time

import pytest
import redis

from devstack import PrivateRedis, tiny_wavenet_spec, wait_for_terminal, wait_until

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


def test_the_worker_keeps_consuming_across_broker_restarts_with_jobs_in_flight(private_redis, stack_on, sqlite_url):
    """kombu 5.7 raised AttributeError on a channel of a lost connection (restoring or
    acknowledging a message), and Celery ended the worker ("Unrecoverable error") at about the
    second restart with three jobs on two slots (trainjobs/broker_transport.py). Every job must end
    succeeded, and the worker must still take a job sent after the last restart."""
    stack = stack_on(sqlite_url, redis_url=private_redis.url)
    client = stack.client(stack.token())
    longer = tiny_wavenet_spec(
        gpus=1, epochs=60, data={"name": "synthetic-audio", "params": {"num_samples": 256, "length": 128, "mu": 32}}
    )
    jobs = [client.post("/v1/jobs", json=longer).json()["id"] for _ in range(3)]
    worker = next(iter(stack.workers.values()))
    wait_until(lambda: client.get(f"/v1/jobs/{jobs[0]}").json()["state"] == "running", 60, what="the first job running")
    for _ in range(6):
        private_redis.stop()
        time.sleep(1)
        private_redis.start()
        time.sleep(4)
        assert worker.poll() is None, f"the worker exited:\n{stack.log_text('worker')[-3000:]}"
    jobs.append(client.post("/v1/jobs", json=tiny_wavenet_spec(gpus=1, epochs=1)).json()["id"])
    states = {job_id: wait_for_terminal(client, job_id, timeout=240)["state"] for job_id in jobs}
    assert set(states.values()) == {"succeeded"}, states
    assert "Unrecoverable error" not in stack.log_text("worker")
