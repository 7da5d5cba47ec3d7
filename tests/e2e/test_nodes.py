"""Jobs across hosts (`nodes`), with real workers that share nothing on disk (each its own home,
checkpoints in moto's S3 server), real launchers and gloo ranks: one DDP world over two workers."""

from __future__ import annotations

import hashlib
import secrets
import subprocess
import time

import pytest

from devstack import (
    HALF_SECOND_EPOCHS,
    NetworkHosts,
    PrivateRedis,
    processes_of_job,
    tiny_wavenet_spec,
    wait_for_terminal,
    wait_until,
)

pytestmark = pytest.mark.e2e

FAST = {
    "TRAINJOBS_LEASE_SECONDS": "3",
    "TRAINJOBS_HEARTBEAT_SECONDS": "1",
    "TRAINJOBS_WORKER_LOST_SECONDS": "5",
    "TRAINJOBS_PROCESS_GROUP_TIMEOUT_SECONDS": "30",
}


@pytest.fixture
def fleet(stack_on, sqlite_url, s3_server, tmp_path):
    """An API and workers each in a home of its own; `add(name, slots)` starts another worker."""
    store = {**s3_server.env, "TRAINJOBS_CHECKPOINT_DIR": f"s3://{s3_server.bucket}/{secrets.token_hex(4)}", **FAST}
    stack = stack_on(sqlite_url, with_worker=False, **store)

    def add(name: str, slots: int = 1) -> str:
        stack.start_worker(name, slots=slots, TRAINJOBS_HOME=str(tmp_path / name))
        return f"{name}-{stack.namespace}"

    return stack, add


def job(client, job_id: str) -> dict:
    return client.get(f"/v1/jobs/{job_id}").json()


def losses(client, job_id: str) -> list[tuple[float, float]]:
    return [(row["train_loss"], row["val_loss"]) for row in client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]]


def test_two_nodes_of_one_rank_train_as_one_node_of_two_ranks(fleet):
    stack, add = fleet
    worker_a, worker_b = add("node-a"), add("node-b")
    client = stack.client(stack.token())
    spec = tiny_wavenet_spec(epochs=3, gpus=2)

    two_nodes = client.post("/v1/jobs", json={**spec, "nodes": 2}).json()["id"]
    done = wait_for_terminal(client, two_nodes, timeout=180)
    assert (done["state"], done["attempt"]) == ("succeeded", 1), done
    assert sorted(done["workers"]) == sorted([worker_a, worker_b]) and done["worker"] == done["workers"][0]
    logs = client.get(f"/v1/jobs/{two_nodes}/logs").text
    assert "[rank 0] rank 0 of 2 on cpu" in logs and "[rank 1] rank 1 of 2 on cpu" in logs
    assert ", node 1 of 2 on " in logs
    for row in client.get(f"/v1/jobs/{two_nodes}/checkpoints").json()["items"]:
        content = client.get(f"/v1/jobs/{two_nodes}/checkpoints/{row['id']}").content
        assert hashlib.sha256(content).hexdigest() == row["sha256"]

    add("node-c", slots=2)
    one_node = client.post("/v1/jobs", json=spec).json()["id"]
    assert wait_for_terminal(client, one_node, timeout=180)["state"] == "succeeded"
    assert len(losses(client, two_nodes)) == 3
    for (train2, val2), (train1, val1) in zip(losses(client, two_nodes), losses(client, one_node), strict=True):
        assert abs(train2 - train1) <= 1e-6 and abs(val2 - val1) <= 1e-6


def test_a_two_node_job_with_one_live_worker_waits_saying_so(fleet):
    stack, add = fleet
    add("node-a")
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(gpus=2, nodes=2)).json()["id"]
    reason = "needs 2 cpu workers with 1 devices each; 1 live cpu worker has that many"
    wait_until(lambda: job(client, job_id)["waiting_reason"] == reason, 30, what="the waiting reason")
    assert job(client, job_id)["state"] == "queued"


def test_cancel_ends_every_process_of_a_two_node_job_on_both_workers(fleet):
    stack, add = fleet
    add("node-a"), add("node-b")
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(gpus=2, nodes=2, epochs=10_000)).json()["id"]
    wait_until(lambda: job(client, job_id)["epoch"] >= 1, 120, what="a first epoch")
    assert len(processes_of_job(job_id)) >= 4  # a launcher and a rank on each worker (and their helpers)

    assert client.post(f"/v1/jobs/{job_id}/cancel").status_code == 202
    started = time.monotonic()
    wait_until(lambda: not processes_of_job(job_id), 20, what="every process of the job to end")
    assert time.monotonic() - started <= 20
    assert wait_for_terminal(client, job_id, timeout=30)["state"] == "cancelled"


def test_a_lost_node_s_worker_requeues_the_job_which_resumes_on_the_workers_left(fleet):
    stack, add = fleet
    add("node-a"), add("node-b")
    client = stack.client(stack.token())
    spec = tiny_wavenet_spec(gpus=2, nodes=2, epochs=6, data=HALF_SECOND_EPOCHS)
    job_id = client.post("/v1/jobs", json=spec).json()["id"]
    wait_until(lambda: job(client, job_id)["epoch"] >= 2, 180, what="two epochs")

    lost = job(client, job_id)["workers"][1]
    stack.kill_worker(lost)  # kill -9: its launcher sees its worker gone and ends its ranks
    add("node-c")
    resumed = wait_for_terminal(client, job_id, timeout=240)
    assert resumed["state"] == "succeeded" and resumed["attempt"] >= 2, resumed
    assert lost not in resumed["workers"]
    assert [row["epoch"] for row in client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]] == list(range(1, 7))
    wait_until(lambda: not processes_of_job(job_id), 20, what="no process of the job left")


@pytest.fixture
def network_hosts():
    hosts = NetworkHosts(2)
    try:
        hosts.create()
    except (OSError, subprocess.CalledProcessError) as error:
        hosts.remove()
        detail = getattr(error, "stderr", "") or error
        pytest.skip(f"this machine refuses network namespaces (ip netns needs root): {detail}")
    yield hosts
    hosts.remove()


@pytest.fixture
def bridged_redis(network_hosts, tmp_path):
    """A Redis of the test's own on the bridge's address. Requested before `stack_on`, so that it
    outlives the stack: the stack's teardown clears its keys there. (Stopped first, the address
    would be gone with the bridge, and the teardown's client would go out through the default
    route, where any host may answer.)"""
    (tmp_path / "redis").mkdir()
    broker = PrivateRedis(tmp_path / "redis", host=network_hosts.gateway)
    broker.start()
    yield broker
    broker.stop()


def test_a_two_node_job_runs_between_two_hosts_on_their_own_addresses(
    bridged_redis, network_hosts, stack_on, sqlite_url, tmp_path
):
    """Each worker in a network namespace of its own, reaching Redis over a bridge: the
    rendezvous works at the workers' own addresses, never 127.0.0.1."""
    shared = {**FAST, "TRAINJOBS_CHECKPOINT_DIR": str(tmp_path / "store")}  # a mounted shared filesystem
    stack = stack_on(sqlite_url, redis_url=bridged_redis.url, with_worker=False, **shared)
    for index in (0, 1):
        stack.start_worker(
            f"ns{index}", slots=1, prefix=network_hosts.prefix(index), TRAINJOBS_HOME=str(tmp_path / f"host{index}")
        )
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(gpus=2, nodes=2, epochs=2)).json()["id"]
    done = wait_for_terminal(client, job_id, timeout=180)
    assert (done["state"], done["epoch"]) == ("succeeded", 2), done
    workers = client.get("/v1/workers").json()["items"]
    assert len(workers) == 2
    logs = stack.log_text("ns0") + stack.log_text("ns1")
    assert all(f"other hosts reach its ranks at {address}" in logs for address in network_hosts.addresses)


def test_a_rank_failing_on_a_node_fails_the_job_naming_the_rank_and_host_and_ends_every_node(fleet):
    stack, add = fleet
    add("node-a"), add("node-b")
    client = stack.client(stack.token())
    spec = tiny_wavenet_spec(gpus=2, nodes=2, optimizer={"name": "sgd", "lr": 1e30, "momentum": 0.0})
    job_id = client.post("/v1/jobs", json=spec).json()["id"]
    ended = wait_for_terminal(client, job_id, timeout=120)
    assert (ended["state"], ended["attempt"]) == ("failed", 1), ended
    assert ended["error"].startswith("rank ") and " on node-" in ended["error"].splitlines()[0]
    assert "FloatingPointError: loss is not finite at epoch 1" in ended["error"]
    wait_until(lambda: not processes_of_job(job_id), 20, what="every process of the job to end")
