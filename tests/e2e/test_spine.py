"""The whole path through real processes: HTTP API, Celery worker, DDP ranks, Redis, SQL."""

import hashlib
import os
import signal

import pytest
import redis
import torch

from devstack import (
    HALF_SECOND_EPOCHS,
    REDIS_URL,
    pid_alive,
    rank_pids,
    tiny_wavenet_spec,
    wait_for_terminal,
    wait_until,
)
from trainjobs.contract.events import JobEvent
from trainjobs.contract.redis_keys import RedisKeys
from trainjobs.contract.spec import JobSpec
from trainjobs.worker.trainer.catalog import build_model

pytestmark = pytest.mark.e2e


def test_a_wavenet_job_on_two_cpu_ranks_trains_reports_and_checkpoints(stack_on, database_url, tmp_path):
    stack = stack_on(database_url)
    client = stack.client(stack.token("alice"))
    submitted = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=3)).json()

    job = wait_for_terminal(client, submitted["id"])
    assert (job["state"], job["stop_reason"], job["error"]) == ("succeeded", "completed", None)
    assert job["epoch"] == 3 and job["worker"] and job["started_at"] and job["finished_at"]

    metrics = client.get(f"/v1/jobs/{job['id']}/metrics").json()["items"]
    assert [row["epoch"] for row in metrics] == [1, 2, 3]
    assert metrics[-1]["train_loss"] < metrics[0]["train_loss"]
    assert all(row["samples_per_second"] > 0 and row["epoch_seconds"] > 0 and row["lr"] == 0.01 for row in metrics)
    assert job["metrics"] == metrics[-1]

    checkpoints = client.get(f"/v1/jobs/{job['id']}/checkpoints").json()["items"]
    assert [checkpoint["epoch"] for checkpoint in checkpoints] == [1, 2, 3]
    last = checkpoints[-1]
    download = client.get(f"/v1/jobs/{job['id']}/checkpoints/{last['id']}")
    assert download.status_code == 200 and download.headers["content-type"] == "application/octet-stream"
    assert (
        hashlib.sha256(download.content).hexdigest() == last["sha256"] and len(download.content) == last["size_bytes"]
    )

    path = tmp_path / "last.pt"
    path.write_bytes(download.content)
    checkpoint = torch.load(path, weights_only=True)
    assert checkpoint["epoch"] == 3 and {"optimizer", "scheduler", "scaler"} <= checkpoint.keys()
    assert not any(key.startswith("module.") for key in checkpoint["model"])
    spec = JobSpec.model_validate(job["spec"])
    build_model(spec.model.name, spec.model.params).load_state_dict(checkpoint["model"], strict=True)


def test_a_rank_killed_mid_job_fails_the_job_naming_the_rank_and_no_rank_survives(stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    client = stack.client(stack.token("alice"))
    spec = tiny_wavenet_spec(epochs=10_000)  # ends only when a rank is killed
    job_id = client.post("/v1/jobs", json=spec).json()["id"]
    wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["epoch"] >= 1, 120, what="the first epoch")
    ranks = rank_pids(job_id)
    assert sorted(ranks) == [0, 1]
    os.kill(ranks[1], signal.SIGKILL)

    job = wait_for_terminal(client, job_id, timeout=60)
    assert (job["state"], job["stop_reason"]) == ("failed", "error")
    assert job["error"].startswith("rank 1 failed (signal SIGKILL)")
    wait_until(lambda: not any(pid_alive(pid) for pid in ranks.values()), 15, what="every rank to end")


def test_metrics_are_complete_and_once_after_the_api_is_killed_mid_job(stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    client = stack.client(stack.token("alice"))
    spec = tiny_wavenet_spec(epochs=6, data=HALF_SECOND_EPOCHS)
    job_id = client.post("/v1/jobs", json=spec).json()["id"]
    wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["epoch"] >= 1, 120, what="the first epoch")

    stack.kill_api()
    # The job goes on without the API; its events wait in the stream until it is back.
    events = redis.Redis.from_url(REDIS_URL)

    def finished_in_stream():
        entries = events.xrange(RedisKeys(stack.namespace).events)
        return any(JobEvent.from_stream_fields(fields).kind == "state" for _, fields in entries)

    wait_until(finished_in_stream, 180, interval=0.5, what="the job's final state in the stream")
    stack.start_api()

    job = wait_for_terminal(client, job_id, timeout=60)
    assert (job["state"], job["stop_reason"], job["epoch"]) == ("succeeded", "completed", 6)
    metrics = client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]
    assert [row["epoch"] for row in metrics] == [1, 2, 3, 4, 5, 6]
    assert len(client.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]) == 3  # keep_last
