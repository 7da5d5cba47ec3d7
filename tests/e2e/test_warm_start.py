"""Warm starts (trainjobs.worker.supervision.LauncherPool): a worker keeps a launcher waiting with
torch and the trainer loaded, and ranks are forked from its fork server. Through a real stack:
one job leaves nothing to the next, losses match a cold start's, and losing a worker, or a
waiting launcher, leaves no process and stops nothing."""

from __future__ import annotations

import os
import re
import signal
import time

import pytest

from devstack import (
    plugin_spec,
    processes_of_job,
    tiny_wavenet_spec,
    wait_for_terminal,
    wait_until,
    waiting_launchers,
)

pytestmark = pytest.mark.e2e


def leaky_spec(seed: int) -> dict:
    return plugin_spec(model={"name": "leaky"}, epochs=2, seed=seed)


def found_by_rank(stack, job_id: str) -> list[str]:
    return [
        line
        for line in stack.client(stack.token()).get(f"/v1/jobs/{job_id}/logs").text.splitlines()
        if "found:" in line
    ]


def losses(client, job_id: str) -> list[tuple[float, float]]:
    return [(row["train_loss"], row["val_loss"]) for row in client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]]


def test_a_job_finds_nothing_an_earlier_job_left_and_trains_as_on_a_cold_start(plugin_installed, stack_on, sqlite_url):
    stack = stack_on(sqlite_url, with_worker=False)
    stack.start_worker("warm")
    client = stack.client(stack.token())
    wait_until(lambda: waiting_launchers(stack.home), 30, what="a launcher waiting for a job")

    first = client.post("/v1/jobs", json=leaky_spec(seed=3)).json()["id"]
    assert wait_for_terminal(client, first)["state"] == "succeeded"
    second = client.post("/v1/jobs", json=leaky_spec(seed=7)).json()["id"]
    assert wait_for_terminal(client, second)["state"] == "succeeded"
    # Each rank of each job: no variable, no open file the earlier one left.
    for job_id in (first, second):
        lines = found_by_rank(stack, job_id)
        assert len(lines) == 2, lines
        assert all("env=None files=[]" in line for line in lines), lines

    # The same spec on a worker that starts every launcher with its job (cold) trains the same.
    stack.kill_worker(f"warm-{stack.namespace}")
    wait_until(lambda: not waiting_launchers(stack.home), 15, what="the lost worker's waiting launcher to exit")
    stack.start_worker("cold", TRAINJOBS_WARM_LAUNCHERS="0")
    cold = client.post("/v1/jobs", json=leaky_spec(seed=7)).json()["id"]
    assert wait_for_terminal(client, cold)["state"] == "succeeded"
    assert waiting_launchers(stack.home) == []
    assert losses(client, cold) == losses(client, second) and len(losses(client, cold)) == 2
    torch_draw = re.compile(r"torch=(\S+)")
    assert {torch_draw.search(line).group(1) for line in found_by_rank(stack, cold)} == {
        torch_draw.search(line).group(1) for line in found_by_rank(stack, second)
    }


def test_a_waiting_launcher_killed_while_idle_is_replaced_and_the_next_job_runs(stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    client = stack.client(stack.token())
    waiting = wait_until(lambda: waiting_launchers(stack.home), 30, what="a launcher waiting for a job")
    os.killpg(waiting[0], signal.SIGKILL)
    wait_until(lambda: not waiting_launchers(stack.home), 10, what="the killed launcher to go")

    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=2)).json()["id"]
    assert wait_for_terminal(client, job_id)["state"] == "succeeded"
    replaced = wait_until(lambda: waiting_launchers(stack.home), 30, what="a new launcher waiting")
    assert replaced[0] != waiting[0]
    time.sleep(1)
    assert processes_of_job(job_id) == []  # the job's launcher, fork server and ranks are gone
