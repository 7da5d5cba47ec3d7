"""Redis restarting without its data while the collector is away (the API down): the epochs that
rank 0 reported meanwhile were in the stream only. The launcher sends again what was not applied
(worker/reporter.py), so the job's metrics are whole."""

from __future__ import annotations

import time

import pytest

from devstack import PrivateRedis, tiny_wavenet_spec, wait_for_terminal, wait_until

pytestmark = pytest.mark.e2e

EPOCHS = 8


@pytest.fixture
def forgetful_redis(tmp_path):
    """Requested before `stack_on`, so that it outlives the stack (whose teardown clears keys there)."""
    server = PrivateRedis(tmp_path / "redis", persist=False)
    (tmp_path / "redis").mkdir()
    server.start()
    yield server
    server.stop()


def test_epochs_reported_while_the_collector_was_away_survive_redis_losing_its_data(
    forgetful_redis, stack_on, sqlite_url
):
    stack = stack_on(sqlite_url, redis_url=forgetful_redis.url)
    client = stack.client(stack.token())
    spec = tiny_wavenet_spec(
        gpus=1,
        epochs=EPOCHS,
        data={"name": "synthetic-audio", "params": {"num_samples": 1024, "length": 128, "mu": 32}},
    )
    job_id = client.post("/v1/jobs", json=spec).json()["id"]
    wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["epoch"] >= 1, 120, what="the first epoch recorded")
    stack.kill_api()
    time.sleep(4)  # a few epochs reported into a stream that nobody reads
    forgetful_redis.stop()
    forgetful_redis.start()
    stack.start_api()
    final = wait_for_terminal(client, job_id, timeout=180)
    assert final["state"] == "succeeded", final
    epochs = [row["epoch"] for row in client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]]
    assert sorted(epochs) == list(range(1, EPOCHS + 1)), epochs
