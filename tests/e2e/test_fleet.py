"""Faults a fleet has every day, done for real to real processes: cancel, a lost worker, a
redelivered message, a timeout, a Redis restart, and device leases across two workers."""

import hashlib
import os
import signal
import time
from datetime import datetime

import pytest
import redis
import torch

from devstack import (
    HALF_SECOND_EPOCHS,
    PrivateRedis,
    find_launcher,
    pid_alive,
    processes_of_job,
    rank_pids,
    tiny_wavenet_spec,
    wait_for_terminal,
    wait_until,
)

pytestmark = pytest.mark.e2e

FAST_FLEET = {"TRAINJOBS_HEARTBEAT_SECONDS": "1", "TRAINJOBS_WORKER_LOST_SECONDS": "5"}


def long_job(**overrides) -> dict:
    """A job that outlasts any test (an epoch of the tiny model can take well under 0.1 s here):
    the test ends it."""
    return tiny_wavenet_spec(epochs=10_000, **overrides)


def job(client, job_id: str) -> dict:
    return client.get(f"/v1/jobs/{job_id}").json()


def test_a_queued_job_that_no_worker_can_take_waits_with_a_reason_and_cancels(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, **FAST_FLEET)
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(gpus=3)).json()["id"]
    reason = "needs 3 cpu devices; the largest live cpu worker has 2"
    wait_until(lambda: job(client, job_id)["waiting_reason"] == reason, 30, what="the waiting reason")
    assert job(client, job_id)["state"] == "queued"

    response = client.post(f"/v1/jobs/{job_id}/cancel")
    assert response.status_code == 202
    assert (response.json()["state"], response.json()["stop_reason"]) == ("cancelled", "cancelled")
    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 409
    time.sleep(2)
    assert job(client, job_id)["started_at"] is None


def test_cancel_ends_every_rank_of_a_running_job_within_10_seconds(stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=long_job()).json()["id"]
    wait_until(lambda: job(client, job_id)["epoch"] >= 1, 120, what="the first epoch")
    ranks = rank_pids(job_id)
    launcher = find_launcher(job_id)

    started = time.monotonic()
    assert client.post(f"/v1/jobs/{job_id}/cancel").json()["state"] == "cancelling"
    wait_until(
        lambda: not any(pid_alive(pid) for pid in [launcher, *ranks.values()]),
        10,
        what="the launcher and every rank to end",
    )
    assert time.monotonic() - started < 10
    ended = wait_for_terminal(client, job_id, timeout=30)
    assert (ended["state"], ended["stop_reason"]) == ("cancelled", "cancelled")
    wait_until(lambda: client.get("/v1/workers").json()["items"][0]["busy"] == 0, 15, what="devices freed")


def test_a_lost_worker_s_job_resumes_elsewhere_from_its_checkpoint_with_each_epoch_once(stack_on, sqlite_url, tmp_path):
    stack = stack_on(sqlite_url, TRAINJOBS_LEASE_SECONDS="3", **FAST_FLEET)
    client = stack.client(stack.token())
    spec = tiny_wavenet_spec(epochs=8, data=HALF_SECOND_EPOCHS, optimizer={"name": "adamw", "lr": 0.01})
    job_id = client.post("/v1/jobs", json=spec).json()["id"]
    wait_until(lambda: job(client, job_id)["epoch"] >= 3, 120, what="three epochs")

    # The host is lost: the worker, its launcher and ranks all die at once.
    launcher = find_launcher(job_id)
    ranks = rank_pids(job_id)
    os.killpg(launcher, signal.SIGKILL)
    stack.kill_worker(f"worker-{stack.namespace}")
    assert not any(pid_alive(pid) for pid in ranks.values()) or wait_until(
        lambda: not any(pid_alive(pid) for pid in ranks.values()), 5, what="ranks gone"
    )

    stack.start_worker("worker2")
    resumed = wait_for_terminal(client, job_id, timeout=180)
    assert (resumed["state"], resumed["stop_reason"], resumed["attempt"]) == ("succeeded", "completed", 2)
    metrics = client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]
    assert [row["epoch"] for row in metrics] == list(range(1, 9))

    # The same spec uninterrupted ends with the same weights.
    straight_id = client.post("/v1/jobs", json=spec).json()["id"]
    assert wait_for_terminal(client, straight_id, timeout=180)["state"] == "succeeded"
    assert_same_final_weights(client, job_id, straight_id, tmp_path)


def test_a_worker_killed_alone_takes_every_process_of_its_job_with_it_at_once(stack_on, sqlite_url):
    """Its launchers see it gone and kill the ranks and their data loader workers at once: a loader
    worker asked nothing notices its rank gone only seconds later, and by then the lease may be out
    and the job's next attempt running elsewhere (the chaos run's rank observer counts them)."""
    stack = stack_on(sqlite_url, **FAST_FLEET)
    client = stack.client(stack.token())
    data = {"name": "synthetic-audio", "params": {"num_samples": 2048, "length": 256, "mu": 32, "num_workers": 2}}
    job_id = client.post("/v1/jobs", json=long_job(data=data)).json()["id"]

    def ranks_and_loaders() -> list[int]:  # each writes to its rank's log: 2 ranks, 2 loader workers each
        found = [pid for pid in processes_of_job(job_id) if "/rank" in _stdout_of(pid)]
        return found if len(found) >= 6 else []

    running = wait_until(ranks_and_loaders, 60, interval=0.05, what="the ranks and their loader workers")
    stack.kill_worker(f"worker-{stack.namespace}")
    wait_until(lambda: not any(map(pid_alive, running)), 1.5, interval=0.05, what="all of them gone")


def _stdout_of(pid: int) -> str:
    try:
        return os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return ""


def test_a_job_whose_worker_is_lost_max_attempts_times_fails_saying_so(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, TRAINJOBS_LEASE_SECONDS="3", TRAINJOBS_MAX_ATTEMPTS="1", **FAST_FLEET)
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=long_job()).json()["id"]
    ranks = rank_pids(job_id, timeout=60)
    os.killpg(find_launcher(job_id), signal.SIGKILL)
    stack.kill_worker(f"worker-{stack.namespace}")

    ended = wait_for_terminal(client, job_id, timeout=60)
    assert (ended["state"], ended["stop_reason"], ended["attempt"]) == ("failed", "error", 1)
    assert ended["error"] == f"worker worker-{stack.namespace} was lost; gave up after 1 attempt"
    wait_until(lambda: not any(map(pid_alive, ranks.values())), 10, what="the ranks to end")


def test_a_stalled_rank_fails_the_job_after_the_process_group_timeout(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, TRAINJOBS_PROCESS_GROUP_TIMEOUT_SECONDS="5")
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=long_job()).json()["id"]
    wait_until(lambda: job(client, job_id)["epoch"] >= 1, 120, what="the first epoch")
    ranks = rank_pids(job_id)

    os.kill(ranks[1], signal.SIGSTOP)  # rank 1 hangs; rank 0 waits for it in the gradient all-reduce
    ended = wait_for_terminal(client, job_id, timeout=100)  # well before gloo's default (120 s) would
    assert (ended["state"], ended["stop_reason"]) == ("failed", "error")
    assert "rank 0 failed" in ended["error"] and "timed out" in ended["error"].lower(), ended["error"]
    wait_until(
        lambda: find_launcher(job_id) is None and not any(map(pid_alive, ranks.values())),
        15,
        what="the launcher and ranks to end",
    )


def assert_same_final_weights(client, first_id: str, second_id: str, tmp_path) -> None:
    weights = []
    for job_id in (first_id, second_id):
        last = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"][-1]
        content = client.get(f"/v1/jobs/{job_id}/checkpoints/{last['id']}").content
        assert hashlib.sha256(content).hexdigest() == last["sha256"]
        path = tmp_path / f"{job_id}.pt"
        path.write_bytes(content)
        weights.append(torch.load(path, weights_only=True)["model"])
    assert weights[0].keys() == weights[1].keys()
    for key in weights[0]:
        assert torch.equal(weights[0][key], weights[1][key]), key


def test_a_job_longer_than_the_broker_visibility_timeout_runs_once(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, TRAINJOBS_BROKER_VISIBILITY_TIMEOUT="2")
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=12, data=HALF_SECOND_EPOCHS)).json()["id"]
    ended = wait_for_terminal(client, job_id, timeout=240)
    assert (ended["state"], ended["attempt"]) == ("succeeded", 1)
    assert [row["epoch"] for row in client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]] == list(range(1, 13))
    log = stack.log_text("worker")
    assert log.count(f"job {job_id} attempt 1: launcher pid") == 1
    # Its message was acknowledged once the job was claimed: Redis had nothing to hand out again
    # while it ran (before, it did every 2 s of its 6 s and more, and the claim refused each copy).
    # A copy may come before the claim, on a loaded machine where the claim takes longer than the
    # 2 s timeout (a CI run saw it), and be dropped as the job is running by then; none later.
    launched = logged_at(log, f"job {job_id} attempt 1: launcher pid")
    assert all(at < launched[0] + 2 for at in logged_at(log, f"message for job {job_id} dropped"))


def logged_at(log: str, text: str) -> list[float]:
    """When each line of a Celery log that holds `text` was written (its "[2026-12-07 09:50:09,592: ..."
    prefix), in seconds."""
    return [
        datetime.strptime(line[1:24], "%Y-%m-%d %H:%M:%S,%f").timestamp() for line in log.splitlines() if text in line
    ]


def test_max_runtime_ends_the_job_as_a_timeout(stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=long_job(max_runtime_seconds=8)).json()["id"]
    ranks = rank_pids(job_id, timeout=30)
    ended = wait_for_terminal(client, job_id, timeout=60)
    assert (ended["state"], ended["stop_reason"]) == ("failed", "timeout")
    assert "max_runtime_seconds=8" in ended["error"]
    assert ended["epoch"] < 10_000
    wait_until(
        lambda: find_launcher(job_id) is None and not any(map(pid_alive, ranks.values())),
        10,
        what="the launcher and ranks to end",
    )


def test_a_rank_that_raises_fails_the_job_with_its_traceback(stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    client = stack.client(stack.token())
    spec = tiny_wavenet_spec(optimizer={"name": "sgd", "lr": 1e30, "momentum": 0.0})
    ended = wait_for_terminal(client, client.post("/v1/jobs", json=spec).json()["id"], timeout=60)
    assert (ended["state"], ended["stop_reason"]) == ("failed", "error")
    assert (
        ended["error"].startswith("rank ")
        and "FloatingPointError: loss is not finite at epoch 1, step" in ended["error"]
    )


def test_nothing_is_lost_when_redis_restarts_mid_job(stack_on, sqlite_url, tmp_path):
    broker = PrivateRedis(tmp_path / "redis")
    (tmp_path / "redis").mkdir()
    broker.start()
    try:
        stack = stack_on(sqlite_url, redis_url=broker.url)
        client = stack.client(stack.token())
        job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=10, data=HALF_SECOND_EPOCHS)).json()["id"]
        wait_until(lambda: job(client, job_id)["epoch"] >= 2, 120, what="two epochs")
        broker.stop()  # SIGTERM: Redis flushes its append-only file
        time.sleep(3)
        broker.start()
        ended = wait_for_terminal(client, job_id, timeout=180)
        assert (ended["state"], ended["stop_reason"]) == ("succeeded", "completed")
        assert [row["epoch"] for row in client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]] == list(range(1, 11))
        assert [c["epoch"] for c in client.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]] == [8, 9, 10]
    finally:
        broker.stop()


def test_a_running_job_s_message_is_acknowledged_once_claimed_and_the_worker_outlives_redis_restarts(
    stack_on, sqlite_url, tmp_path
):
    """An unacknowledged message was restored at every broker reconnect, and kombu's restore
    could crash the worker (the chaos run: all three workers gone after Redis restarts)."""
    (tmp_path / "redis").mkdir()
    broker = PrivateRedis(tmp_path / "redis")
    broker.start()
    try:
        stack = stack_on(sqlite_url, redis_url=broker.url)
        client = stack.client(stack.token())
        job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=12, data=HALF_SECOND_EPOCHS)).json()["id"]
        wait_until(lambda: job(client, job_id)["epoch"] >= 1, 120, what="the first epoch")
        unacked = redis.Redis.from_url(broker.url)
        assert unacked.hlen("unacked") == 0  # kombu's hash of delivered, unacknowledged messages
        for _ in range(3):
            broker.stop()
            time.sleep(1)
            broker.start()
            time.sleep(2)
        assert wait_for_terminal(client, job_id, timeout=180)["state"] == "succeeded"
        assert all(process.poll() is None for process in stack.workers.values())
    finally:
        broker.stop()


def test_two_workers_lease_their_own_slots_and_a_job_too_big_for_both_waits(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, **FAST_FLEET)
    stack.start_worker("second")
    client = stack.client(stack.token())
    wait_until(lambda: len(client.get("/v1/workers").json()["items"]) == 2, 30, what="two workers")
    two = client.post("/v1/jobs", json=long_job(gpus=2)).json()["id"]
    ones = [client.post("/v1/jobs", json=long_job(gpus=1)).json()["id"] for _ in range(3)]
    three = client.post("/v1/jobs", json=long_job(gpus=3)).json()["id"]

    # 4 slots: the 2-rank job and two 1-rank jobs run, on two hosts; the third 1-rank job waits.
    def running():
        states = {job_id: job(client, job_id)["state"] for job_id in [two, *ones]}
        return [job_id for job_id, state in states.items() if state == "running"]

    wait_until(lambda: len(running()) == 3, 60, what="three jobs running")
    time.sleep(3)
    assert len(running()) == 3
    workers = client.get("/v1/workers").json()["items"]
    assert sorted(worker["busy"] for worker in workers) == [2, 2]
    assert all(worker["busy"] <= worker["slots"] for worker in workers)
    placed = {job_id for worker in workers for job_id in worker["jobs"]}
    assert two in placed and len(placed) == 3
    wait_until(
        lambda: job(client, three)["waiting_reason"] == "needs 3 cpu devices; the largest live cpu worker has 2",
        15,
        what="the 3-rank job's waiting reason",
    )
    for job_id in [two, *ones, three]:
        client.post(f"/v1/jobs/{job_id}/cancel")


def test_jobs_start_in_submission_order_so_a_wide_job_is_not_starved_by_narrow_ones(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, **FAST_FLEET)
    client = stack.client(stack.token())
    first = client.post("/v1/jobs", json=long_job(gpus=1)).json()["id"]
    wait_until(lambda: job(client, first)["state"] == "running", 60, what="the first job running")
    wide = client.post("/v1/jobs", json=long_job(gpus=2)).json()["id"]
    narrow = client.post("/v1/jobs", json=long_job(gpus=1)).json()["id"]

    # One slot is free, and the narrow job would fit it, but the wide job came first.
    time.sleep(4)
    assert (job(client, wide)["state"], job(client, narrow)["state"]) == ("queued", "queued")

    client.post(f"/v1/jobs/{first}/cancel")
    wait_until(lambda: job(client, wide)["state"] == "running", 60, what="the wide job running")
    assert job(client, narrow)["state"] == "queued"
    for job_id in [wide, narrow]:
        client.post(f"/v1/jobs/{job_id}/cancel")
