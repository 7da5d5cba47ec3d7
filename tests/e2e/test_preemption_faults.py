"""Faults in the middle of a preemption: the victim's host lost while it checkpoints, the API
killed while the preemption is under way. Each waits out a lease or a restart: the chaos lane's
(tests/lanes.py). The victim and its preemptor are test_preemption.py's."""

import os
import re
import signal

import pytest

from devstack import find_launcher, rank_pids, wait_for_terminal, wait_until
from tests.e2e.test_preemption import FAST_FLEET, FAST_SHARING, PREEMPTOR, VICTIM, inside_an_epoch

pytestmark = pytest.mark.e2e


def preempting(client, job_id: str) -> bool:
    return client.get(f"/v1/jobs/{job_id}").json()["state"] == "preempting"


def test_a_victim_whose_worker_dies_while_it_checkpoints_resumes_from_its_last_good_checkpoint(stack_on, sqlite_url):
    """The host is lost once the job is preempting, before its checkpoint is in: the lease runs
    out, the job goes back to the queue as preempted (never counted towards giving up), and
    resumes from its last epoch's checkpoint; the preemptor starts once, on devices freed once."""
    stack = stack_on(sqlite_url, TRAINJOBS_LEASE_SECONDS="3", TRAINJOBS_MAX_ATTEMPTS="1", **FAST_SHARING, **FAST_FLEET)
    alice, admin = stack.client(stack.token("alice")), stack.client(stack.token("root", admin=True))
    victim = alice.post("/v1/jobs", json=VICTIM).json()["id"]
    wait_until(lambda: inside_an_epoch(alice, victim), 120, interval=0.1, what="the victim inside an epoch")
    launcher, ranks = find_launcher(victim), rank_pids(victim)
    for pid in ranks.values():
        os.kill(pid, signal.SIGSTOP)  # it cannot reach its step: the checkpoint never comes
    preemptor = admin.post("/v1/jobs", json=PREEMPTOR).json()["id"]
    wait_until(lambda: preempting(alice, victim), 60, interval=0.1, what="the victim preempting")
    os.killpg(launcher, signal.SIGKILL)
    stack.kill_worker(f"worker-{stack.namespace}")
    for pid in ranks.values():
        os.kill(pid, signal.SIGKILL)
    stack.start_worker("worker2")
    assert wait_for_terminal(admin, preemptor)["state"] == "succeeded"
    finished = wait_for_terminal(alice, victim, timeout=240)
    # Once in a CI run it was preempted a second time after it resumed (not explained yet: see
    # issue 36's note); every preemption still counts once and none towards giving up.
    assert finished["state"] == "succeeded" and finished["preemptions"] >= 1
    assert finished["attempt"] == finished["preemptions"] + 1
    assert [row["epoch"] for row in alice.get(f"/v1/jobs/{victim}/metrics").json()["items"]] == [1, 2, 3]
    assert "preempted: checkpointed step" not in alice.get(f"/v1/jobs/{victim}/logs?attempt=1").text
    assert "trainjobs_devices_in_use{" not in admin.get("/metrics").text  # nothing held twice, nothing left


def test_the_api_killed_in_the_middle_of_a_preemption_completes_it_once(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, **FAST_SHARING)
    alice, admin = stack.client(stack.token("alice")), stack.client(stack.token("root", admin=True))
    victim = alice.post("/v1/jobs", json=VICTIM).json()["id"]
    wait_until(lambda: inside_an_epoch(alice, victim), 120, interval=0.1, what="the victim inside an epoch")
    preemptor = admin.post("/v1/jobs", json=PREEMPTOR).json()["id"]
    wait_until(lambda: preempting(alice, victim), 60, interval=0.05, what="the victim preempting")
    stack.kill_api()  # the leader: its collector has not applied the victim's checkpoint yet, or just has
    stack.start_api()
    assert wait_for_terminal(admin, preemptor)["state"] == "succeeded"
    finished = wait_for_terminal(alice, victim, timeout=240)
    assert (finished["state"], finished["preemptions"], finished["attempt"]) == ("succeeded", 1, 2)
    assert [row["epoch"] for row in alice.get(f"/v1/jobs/{victim}/metrics").json()["items"]] == [1, 2, 3]
    inside = [row["step"] for row in alice.get(f"/v1/jobs/{victim}/checkpoints").json()["items"] if row["step"] > 0]
    stopped_at = re.findall(r"preempted: checkpointed step (\d+)", alice.get(f"/v1/jobs/{victim}/logs?attempt=1").text)
    # The preemption's checkpoint recorded once; none inside an epoch where the stop fell on an epoch's end.
    assert inside == [int(step) for step in stopped_at]
