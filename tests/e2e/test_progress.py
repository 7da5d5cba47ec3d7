"""Inside a running job, through the real stack: progress
within a long epoch on the job and its event stream, each epoch's new figures, and per-job
Prometheus series that go when the job ends."""

from __future__ import annotations

import json

import httpx
import pytest

from devstack import tiny_wavenet_spec, wait_for_terminal, wait_until

pytestmark = pytest.mark.e2e

# Epochs of 10 to 16 s on 2 cpu ranks here (it varies with the machine's load). Progress comes
# every 4 s in this test, so it shows inside the first epoch however long that one takes.
LONG_EPOCHS = {"name": "synthetic-audio", "params": {"num_samples": 32768, "length": 256, "mu": 32}}


def per_job_series(client, job_id: str) -> list[str]:
    return [line for line in client.get("/metrics").text.splitlines() if f'job="{job_id}"' in line]


def test_a_long_epoch_shows_progress_and_each_epoch_its_wait_memory_and_gpu_figures(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, TRAINJOBS_PROGRESS_SECONDS="4")
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=2, data=LONG_EPOCHS)).json()["id"]

    def progress_before_the_first_epoch_ends():
        job = client.get(f"/v1/jobs/{job_id}").json()
        return job["progress"] if job["progress"] and job["epoch"] == 0 else None

    progress = wait_until(progress_before_the_first_epoch_ends, 60, interval=0.5, what="progress in epoch 1")
    assert progress["epoch"] == 1 and 0 <= progress["step"] <= progress["steps"] and progress["steps"] > 0
    assert progress["samples_per_second"] > 0 and progress["eta_seconds"] > 0

    wait_until(lambda: client.get(f"/v1/jobs/{job_id}").json()["epoch"] >= 1, 120, what="the first epoch")
    anonymous = httpx.get(f"{stack.url}/metrics").text
    assert job_id not in anonymous and 'owner="' not in anonymous  # counts only without a token
    assert per_job_series(client, job_id) == []  # nor for a token that is not an admin's
    series = per_job_series(stack.client(stack.token("root", admin=True)), job_id)
    assert any(line.startswith("trainjobs_job_samples_per_second") for line in series), series
    assert any(line.startswith("trainjobs_job_peak_memory_bytes") for line in series), series

    job = wait_for_terminal(client, job_id, timeout=180)
    assert job["state"] == "succeeded" and job["progress"] is None
    for row in client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]:
        assert 0 <= row["data_wait_fraction"] <= 1 and row["peak_memory_bytes"] > 0 and row["gpu_utilization"] is None
    kinds = []
    with client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=30) as response:
        for line in response.iter_lines():
            if line.startswith("event: "):
                kinds.append(line.removeprefix("event: "))
            elif line.startswith("data: ") and kinds[-1] == "progress":
                assert set(json.loads(line[6:])) >= {"epoch", "step", "steps", "samples_per_second", "eta_seconds"}
    assert kinds.count("progress") >= 4  # inside each epoch, and at each epoch's end
    assert per_job_series(stack.client(stack.token("root", admin=True)), job_id) == []  # dropped once it ended


def test_a_slow_loader_s_data_wait_shows_through_the_service_and_loader_workers_lower_it(
    plugin_installed, stack_on, sqlite_url
):
    from tests.worker.test_telemetry import sleepy_spec

    stack = stack_on(sqlite_url)
    client = stack.client(stack.token())
    waits = {}
    for workers in (0, 4):
        job_id = client.post("/v1/jobs", json=sleepy_spec(num_workers=workers)).json()["id"]
        assert wait_for_terminal(client, job_id, timeout=120)["state"] == "succeeded"
        waits[workers] = client.get(f"/v1/jobs/{job_id}/metrics").json()["items"][-1]["data_wait_fraction"]
    assert waits[0] > 0.4 and waits[4] < 0.6 * waits[0], waits
