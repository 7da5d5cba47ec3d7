"""Sharing one worker between two owners, through the real API, worker and ranks: fair shares
reached by the fewest preemptions, caps, and preemption switched off."""

import time

import pytest

from devstack import HALF_SECOND_EPOCHS, tiny_wavenet_spec, wait_until

pytestmark = pytest.mark.e2e

LONG = tiny_wavenet_spec(gpus=1, epochs=10_000, data=HALF_SECOND_EPOCHS)  # runs until cancelled
NO_WAIT = {"TRAINJOBS_PREEMPT_MIN_RUNTIME_SECONDS": "0"}


def running_of(client, owner: str) -> int:
    jobs = client.get("/v1/jobs", params={"state": "running", "owner": owner, "limit": 100}).json()["items"]
    return len(jobs)


def split_and_preemptions(admin) -> tuple[dict[str, int], int]:
    jobs = admin.get("/v1/jobs", params={"limit": 100}).json()["items"]
    split = {
        owner: sum(job["state"] == "running" and job["owner"] == owner for job in jobs) for owner in ("alice", "bob")
    }
    return split, sum(job["preemptions"] for job in jobs)


def fill_then_share(stack, weights: tuple[float, float]) -> tuple[dict[str, int], int]:
    """alice fills the 4 slots, then bob submits 4; the split and the preemptions once it holds."""
    admin = stack.client(stack.token("root", admin=True))
    alice, bob = stack.client(stack.token("alice")), stack.client(stack.token("bob"))
    admin.put("/v1/owners/alice", json={"weight": weights[0]})
    admin.put("/v1/owners/bob", json={"weight": weights[1]})
    for _ in range(4):
        alice.post("/v1/jobs", json=LONG)
    wait_until(lambda: running_of(admin, "alice") == 4, 120, what="alice on all 4 slots")
    for _ in range(4):
        bob.post("/v1/jobs", json=LONG)
    expected_bob = 2 if weights[0] == weights[1] else 1
    wait_until(lambda: running_of(admin, "bob") == expected_bob, 120, what="bob's share")
    time.sleep(5)  # ten sweeps more: nothing else moves
    found = split_and_preemptions(admin)
    for job in admin.get("/v1/jobs", params={"limit": 100}).json()["items"]:
        admin.post(f"/v1/jobs/{job['id']}/cancel")
    return found


def test_equal_weights_reach_two_and_two_after_exactly_two_preemptions(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, cpu_slots=4, **NO_WAIT)
    assert fill_then_share(stack, (1.0, 1.0)) == ({"alice": 2, "bob": 2}, 2)


def test_weights_three_to_one_reach_three_and_one_after_exactly_one_preemption(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, cpu_slots=4, **NO_WAIT)
    assert fill_then_share(stack, (3.0, 1.0)) == ({"alice": 3, "bob": 1}, 1)


def test_with_preemption_off_and_a_cap_the_order_and_the_cap_still_hold(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, cpu_slots=2, TRAINJOBS_PREEMPTION="false", **NO_WAIT)
    admin = stack.client(stack.token("root", admin=True))
    alice, bob = stack.client(stack.token("alice")), stack.client(stack.token("bob"))
    admin.put("/v1/owners/alice", json={"max_devices": {"cpu": 1}})
    first = alice.post("/v1/jobs", json=LONG).json()["id"]
    capped = alice.post("/v1/jobs", json=LONG).json()["id"]
    wait_until(lambda: alice.get(f"/v1/jobs/{first}").json()["state"] == "running", 120, what="alice's first job")
    capped_reason = lambda: "max_devices" in (alice.get(f"/v1/jobs/{capped}").json()["waiting_reason"] or "")  # noqa: E731
    wait_until(capped_reason, 30, what="the cap as its reason")  # a free slot, but alice is at her cap
    urgent = admin.post("/v1/jobs", json={**LONG, "gpus": 2, "priority": 100}).json()["id"]
    bobs = bob.post("/v1/jobs", json=LONG).json()["id"]
    time.sleep(3)  # six sweeps: with preemption on, alice's job would be preempted for the urgent one
    assert admin.get(f"/v1/jobs/{first}").json()["preemptions"] == 0
    queue = lambda: admin.get("/v1/queue", params={"device": "cpu"}).json()["items"]  # noqa: E731
    wait_until(lambda: "higher priority" in (queue()[1]["reason"] or ""), 30, what="bob's job behind the urgent one")
    assert [item["job"] for item in queue()] == [urgent, bobs, capped]  # priority, then use / weight, then age
    admin.post(f"/v1/jobs/{first}/cancel")
    wait_until(lambda: admin.get(f"/v1/jobs/{urgent}").json()["state"] == "running", 60, what="the urgent job")
    for job_id in (first, capped, urgent, bobs):
        admin.post(f"/v1/jobs/{job_id}/cancel")
