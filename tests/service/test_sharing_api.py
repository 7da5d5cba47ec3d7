"""The sharing settings and the queue on the real app, SQL and Redis: PUT /v1/owners is for
admins, the settings bound what an owner may submit, and GET /v1/queue shows the start order
with each job's reason and each owner's share."""

import time

import pytest
import redis

from devstack import REDIS_URL, new_token, tiny_wavenet_spec
from trainjobs.contract.workers import WorkerStatus


@pytest.fixture
def admin(settings) -> dict[str, str]:
    return {"Authorization": f"Bearer {new_token(settings.sql_url, 'root', admin=True)}"}


def test_only_an_admin_changes_an_owners_settings(api, alice, admin):
    body = {"weight": 3.0, "max_devices": {"cpu": 2}, "max_priority": 80, "allow_non_preemptible": True}
    assert api.put("/v1/owners/alice", json=body, headers=alice).status_code == 403
    put = api.put("/v1/owners/alice", json=body, headers=admin)
    assert put.status_code == 200
    assert put.json() == {**body, "owner": "alice", "max_devices": {"cpu": 2, "cuda": None}}
    assert api.get("/v1/owners", headers=alice).json()["items"] == [put.json()]
    assert [item["owner"] for item in api.get("/v1/owners", headers=admin).json()["items"]] == ["alice"]


def test_an_owner_without_settings_reads_the_defaults(api, bob):
    assert api.get("/v1/owners", headers=bob).json()["items"] == [
        {
            "owner": "bob",
            "weight": 1.0,
            "max_devices": {"cuda": None, "cpu": None},
            "max_priority": 50,
            "allow_non_preemptible": False,
        }
    ]


@pytest.mark.parametrize(
    "body", [{"weight": 0}, {"weight": -1}, {"max_priority": 101}, {"max_devices": {"tpu": 1}}, {"colour": 1}]
)
def test_bad_settings_are_refused_naming_the_field(api, admin, body):
    response = api.put("/v1/owners/alice", json=body, headers=admin)
    assert response.status_code == 422
    assert next(iter(body)) in response.text


def test_priority_and_preemptibility_are_bounded_by_the_owners_settings(api, alice, admin):
    too_high = api.post("/v1/jobs", json=tiny_wavenet_spec(priority=60), headers=alice)
    assert too_high.status_code == 422 and "priority" in too_high.text
    protected = api.post("/v1/jobs", json=tiny_wavenet_spec(preemptible=False), headers=alice)
    assert protected.status_code == 422 and "preemptible" in protected.text
    assert api.post("/v1/jobs", json=tiny_wavenet_spec(priority=90), headers=admin).status_code == 201  # admin's own
    api.put("/v1/owners/alice", json={"max_priority": 70, "allow_non_preemptible": True}, headers=admin)
    allowed = api.post("/v1/jobs", json=tiny_wavenet_spec(priority=70, preemptible=False), headers=alice)
    assert allowed.status_code == 201
    assert (allowed.json()["spec"]["priority"], allowed.json()["spec"]["preemptible"]) == (70, False)


def test_the_queue_shows_the_start_order_with_reasons_and_shares(api, alice, bob, settings):
    client = redis.Redis.from_url(REDIS_URL)
    worker = WorkerStatus(hostname="w1", device="cpu", slots=2, busy=0, jobs=[], last_seen=time.time())
    client.hset(settings.keys.workers, "w1", worker.model_dump_json())
    first = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    second = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    bobs = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=bob).json()["id"]
    seen = api.get("/v1/queue?device=cpu", headers=alice).json()
    # alice's second job comes after bob's: by then she would hold 2 devices, he none
    assert [item["job"] for item in seen["items"]] == [first, None, second]
    assert [item["owner"] for item in seen["items"]] == ["alice", "bob", "alice"]
    assert seen["items"][0]["reason"] is None  # it starts: the worker's 2 slots are free (SQL holds no job)
    assert all("waiting for 2 free cpu devices" in item["reason"] for item in seen["items"][1:])
    assert {owner["owner"]: owner["share"] for owner in seen["owners"]} == {"alice": 1.0, "bob": 1.0}
    assert bobs in [item["job"] for item in api.get("/v1/queue?device=cpu", headers=bob).json()["items"]]
