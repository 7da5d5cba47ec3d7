"""Hosts that share nothing on disk: the API and
each worker have a home of their own, and checkpoints live in a real S3-compatible server
(moto's standalone server), written by rank 0, read back on resume by another host, streamed by
the API."""

from __future__ import annotations

import hashlib
import os
import re
import secrets
import signal

import pytest

from devstack import (
    HALF_SECOND_EPOCHS,
    find_launcher,
    rank_pids,
    tiny_wavenet_spec,
    wait_for_terminal,
    wait_until,
)

pytestmark = pytest.mark.e2e


def test_a_job_resumes_on_another_host_from_the_object_store_and_downloads_stream_from_it(
    stack_on, sqlite_url, s3_server, tmp_path
):
    prefix = secrets.token_hex(4)
    store = {
        **s3_server.env,
        "TRAINJOBS_CHECKPOINT_DIR": f"s3://{s3_server.bucket}/{prefix}",
        "TRAINJOBS_LEASE_SECONDS": "3",
        "TRAINJOBS_HEARTBEAT_SECONDS": "1",
        "TRAINJOBS_WORKER_LOST_SECONDS": "5",
    }
    stack = stack_on(sqlite_url, with_worker=False, **store)
    host_a, host_b = tmp_path / "host-a", tmp_path / "host-b"
    stack.start_worker("worker-a", TRAINJOBS_HOME=str(host_a))
    client = stack.client(stack.token())
    spec = tiny_wavenet_spec(epochs=6, data=HALF_SECOND_EPOCHS)
    job_id = client.post("/v1/jobs", json=spec).json()["id"]
    wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["epoch"] >= 2, 120, what="two epochs")

    # Host A is lost whole; host B, which has never seen the job, takes it over.
    ranks = rank_pids(job_id)
    os.killpg(find_launcher(job_id), signal.SIGKILL)
    stack.kill_worker(f"worker-a-{stack.namespace}")
    for pid in ranks.values():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    stack.start_worker("worker-b", TRAINJOBS_HOME=str(host_b))
    job = wait_for_terminal(client, job_id, timeout=180)
    assert (job["state"], job["attempt"]) == ("succeeded", 2), job
    assert [row["epoch"] for row in client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]] == list(range(1, 7))

    logs_came_over_the_network(client, job_id, stack.home)
    checkpoints_are_objects_in_the_store(client, job_id, s3_server, prefix, (stack.home, host_a, host_b))


def logs_came_over_the_network(client, job_id: str, api_home) -> None:
    # Logs came over the network: the API's host never saw a rank's file. The lost host's
    # attempt stays readable.
    assert not list(api_home.rglob("rank*.log"))
    first = client.get(f"/v1/jobs/{job_id}/logs", params={"attempt": 1}).text
    second = client.get(f"/v1/jobs/{job_id}/logs").text
    assert "[rank 0] rank 0 of 2 on cpu" in first and "[rank 1] rank 1 of 2 on cpu" in first
    assert "[rank 0] resumed from" in second and "[rank 1] rank 1 done after epoch 6: completed" in second


def checkpoints_are_objects_in_the_store(client, job_id: str, s3_server, prefix: str, homes: tuple) -> None:
    # Checkpoints are objects in the store, none a file on any host.
    listed = client.get(f"/v1/jobs/{job_id}/checkpoints").json()["items"]
    objects = s3_server.objects(prefix)
    # (each attempt writes in a folder of its own: <job>/a<attempt>/<id>.pt)
    assert sorted(f"{prefix}/{job_id}/{row['id']}.pt" for row in listed) == sorted(
        re.sub(r"/a\d+/", "/", key) for key in objects
    )
    assert not any(path.suffix == ".pt" for home in homes for path in home.rglob("*"))
    for row in listed:
        download = client.get(f"/v1/jobs/{job_id}/checkpoints/{row['id']}")
        assert download.status_code == 200 and int(download.headers["content-length"]) == row["size_bytes"]
        assert hashlib.sha256(download.content).hexdigest() == row["sha256"]
    # Rotation removed objects: keep_last 3 (the default) plus the best, at most.
    assert len(objects) <= 4


def test_logs_follow_streams_lines_while_the_job_runs_and_ends_with_it(stack_on, sqlite_url, tmp_path):
    stack = stack_on(sqlite_url, with_worker=False)
    stack.start_worker("worker-a", TRAINJOBS_HOME=str(tmp_path / "host-a"))
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=8, data=HALF_SECOND_EPOCHS)).json()["id"]

    followed, states_seen = [], set()
    with client.stream("GET", f"/v1/jobs/{job_id}/logs", params={"follow": "true"}, timeout=120) as response:
        assert response.status_code == 200
        for line in response.iter_lines():
            followed.append(line)
            if len(followed) == 1:  # the first line arrived: the job is still running
                states_seen.add(client.get(f"/v1/jobs/{job_id}").json()["state"])
    assert states_seen == {"running"}
    final = client.get(f"/v1/jobs/{job_id}/logs").text.splitlines()
    assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "succeeded"
    assert sorted(followed) == sorted(final) and "[rank 1] rank 1 done after epoch 8: completed" in final
