"""One user, one stream entry or one host cannot stall the service for everyone, through the real
API, worker, Redis and SQL: after each bad thing, another owner's job submitted afterwards
succeeds with every epoch recorded, in bounded time."""

from __future__ import annotations

import json

import pytest
import redis

from devstack import REDIS_URL, PrivateRedis, processes_of_job, tiny_wavenet_spec, wait_for_terminal, wait_until
from tests.service.test_bad_requests import body_with
from trainjobs.contract.redis_keys import RedisKeys

pytestmark = pytest.mark.e2e


def assert_bob_s_job_runs_whole(bob, epochs: int = 2) -> str:
    job_id = bob.post("/v1/jobs", json=tiny_wavenet_spec(epochs=epochs)).json()["id"]
    job = wait_for_terminal(bob, job_id, timeout=90)
    assert (job["state"], job["epoch"]) == ("succeeded", epochs), job
    assert [row["epoch"] for row in bob.get(f"/v1/jobs/{job_id}/metrics").json()["items"]] == list(range(1, epochs + 1))
    return job_id


FORGED = {  # bob's checkpoint, claimed for another job, its path leading out of that job's folder
    "id": "jbob-e0001",
    "epoch": 1,
    "size_bytes": 1,
    "sha256": "0" * 64,
    "is_best": True,
    "created_at": "2026-01-01T00:00:00Z",
    "path": "../jbob/jbob-e0001.pt",
}


def test_no_bad_spec_stream_entry_diverging_job_or_heartbeat_stalls_another_owner(stack_on, database_url):
    stack = stack_on(database_url)
    alice, bob = stack.client(stack.token("alice")), stack.client(stack.token("bob"))
    events = redis.Redis.from_url(REDIS_URL)
    stream = RedisKeys(stack.namespace).events

    # 1. Infinity in a spec: refused, nothing stored.
    infinite = body_with(optimizer='{"name": "adamw", "lr": 0.01, "weight_decay": 1e999}')
    response = alice.post("/v1/jobs", content=infinite, headers={"Content-Type": "application/json"})
    assert response.status_code == 422
    assert_bob_s_job_runs_whole(bob)

    # 2. A job whose loss diverges after its first step (one step per epoch) fails, saying so;
    #    never a "worker lost" requeue. And entries no SQL column can hold.
    diverging = tiny_wavenet_spec(gpus=1, batch_size=64, optimizer={"name": "adamw", "lr": 1e30}, epochs=3)
    job_id = alice.post("/v1/jobs", json=diverging).json()["id"]
    failed = wait_for_terminal(alice, job_id, timeout=90)
    assert (failed["state"], failed["attempt"]) == ("failed", 1) and "not finite" in failed["error"], failed
    for data in (
        '{"epoch": 1, "train_loss": 1.0, "val_loss": NaN, "lr": 0.1, "epoch_seconds": 1, "samples_per_second": 1}',
        "{}",
        json.dumps({"epoch": 10**20}),
    ):
        events.xadd(stream, {"job_id": job_id, "attempt": "1", "kind": "metrics", "data": data})
    assert_bob_s_job_runs_whole(bob)

    # 3. Forged events: another job's checkpoint moved to alice's.
    events.xadd(stream, {"job_id": job_id, "attempt": "1", "kind": "checkpoint", "data": json.dumps(FORGED)})
    assert_bob_s_job_runs_whole(bob)

    # 4. A malformed heartbeat in the workers' hash.
    events.hset(RedisKeys(stack.namespace).workers, "not-a-worker", "{")
    assert bob.get("/v1/workers").status_code == 200
    assert_bob_s_job_runs_whole(bob)

    dead = events.xrange(f"{stream}:dead")
    assert len(dead) == 4, dead
    metrics_text = bob.get("/metrics").text
    assert "trainjobs_dead_letter_events 4.0" in metrics_text


def test_a_redis_that_requires_a_password_runs_jobs_end_to_end(stack_on, sqlite_url, tmp_path):
    broker = PrivateRedis(tmp_path / "redis", password="s3cret-for-tests")
    (tmp_path / "redis").mkdir()
    broker.start()
    try:
        with pytest.raises(redis.AuthenticationError):  # no password, no access
            redis.Redis(port=broker.port).ping()
        stack = stack_on(sqlite_url, redis_url=broker.url)
        bob = stack.client(stack.token("bob"))
        job_id = assert_bob_s_job_runs_whole(bob)
        # What the service wrote for the job is not readable by other users of the host, once its
        # launcher is gone: until then its sandbox's slot is open to the ranks' user (0755), and the
        # launcher now outlives the job's end by the moment it waits to see its last events applied.
        wait_until(lambda: not processes_of_job(job_id), 30, what="the job's launcher to exit")
        written = [path for folder in ("checkpoints", "runs") for path in (stack.home / folder).rglob("*")]
        readable = [f"{path} {path.stat().st_mode:o}" for path in written if path.stat().st_mode & 0o007]
        assert written and readable == []
    finally:
        broker.stop()
