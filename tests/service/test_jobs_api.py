"""The jobs endpoints on the real app, real SQL (SQLite and PostgreSQL) and real Redis."""

import json

import pytest
from sqlalchemy import func, select

from devstack import tiny_wavenet_spec
from trainjobs.jobs.db import make_engine
from trainjobs.jobs.tables import ApiTokenRow, JobRow


def count_jobs(settings) -> int:
    engine = make_engine(settings.sql_url)
    with engine.connect() as connection:
        count = connection.execute(select(func.count()).select_from(JobRow)).scalar_one()
    engine.dispose()
    return count


def test_submit_returns_the_job_with_defaults_and_location(api, alice):
    response = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice)
    assert response.status_code == 201
    job = response.json()
    assert response.headers["Location"] == f"/v1/jobs/{job['id']}"
    assert job["state"] == "queued" and job["owner"] == "alice" and job["epoch"] == 0 and job["attempt"] == 1
    assert job["effective"] == {"world_size": 2, "global_batch_size": 16, "lr": 0.01}
    assert job["spec"]["scheduler"] == {"name": "none", "warmup_epochs": 0}
    assert job["created_at"].endswith(("Z", "+00:00"))
    assert api.get(f"/v1/jobs/{job['id']}", headers=alice).json() == job


def test_submit_enqueues_one_message_after_the_commit(api, alice, settings):
    import redis

    job = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()
    queue = redis.Redis.from_url(settings.redis_url).lrange(f"{settings.namespace}.cpu", 0, -1)
    assert len(queue) == 1
    message = json.loads(queue[0])
    assert message["headers"]["task"] == "trainjobs.run_job"
    assert job["id"] in json.dumps(message)


BAD_BODIES = [
    ("unknown field", {**tiny_wavenet_spec(), "colour": "blue"}, 422, "colour"),
    ("unknown model", {**tiny_wavenet_spec(), "model": {"name": "gpt9"}}, 422, "model.name"),
    (
        "unknown model param",
        {**tiny_wavenet_spec(), "model": {"name": "wavenet", "params": {"depth": 3}}},
        422,
        "model.params.depth",
    ),
    ("gpus 0", {**tiny_wavenet_spec(), "gpus": 0}, 422, "gpus"),
    ("negative batch", {**tiny_wavenet_spec(), "batch_size": -1}, 422, "batch_size"),
    ("fp8", {**tiny_wavenet_spec(), "precision": "fp8"}, 422, "precision"),
    ("string epochs", {**tiny_wavenet_spec(), "epochs": "ten"}, 422, "epochs"),
    ("not an object", [1, 2, 3], 422, "body"),
]


@pytest.mark.parametrize("label, body, status, names", BAD_BODIES, ids=[case[0] for case in BAD_BODIES])
def test_bad_input_is_refused_naming_the_problem_and_stores_nothing(api, alice, settings, label, body, status, names):
    response = api.post("/v1/jobs", json=body, headers=alice)
    assert response.status_code == status
    assert names in json.dumps(response.json()["detail"])
    assert count_jobs(settings) == 0


def test_a_body_that_is_not_json_is_422(api, alice, settings):
    response = api.post("/v1/jobs", content=b"{not json", headers={**alice, "Content-Type": "application/json"})
    assert response.status_code == 422
    assert "JSON" in json.dumps(response.json()["detail"])
    assert count_jobs(settings) == 0


def test_a_10_mb_body_is_413(api, alice, settings):
    body = json.dumps({**tiny_wavenet_spec(), "name": "x" * (10 * 1024 * 1024)}).encode()
    response = api.post("/v1/jobs", content=body, headers={**alice, "Content-Type": "application/json"})
    assert response.status_code == 413
    assert "bytes" in response.json()["detail"]
    assert count_jobs(settings) == 0


def test_requests_without_a_valid_token_are_401(api, alice):
    assert api.get("/v1/jobs").status_code == 401
    assert api.get("/v1/jobs", headers={"Authorization": "Bearer tj_not-a-token"}).status_code == 401
    assert api.post("/v1/jobs", json=tiny_wavenet_spec()).status_code == 401


def test_another_owners_job_is_404(api, alice, bob):
    job = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()
    for path in ("", "/metrics", "/checkpoints"):
        response = api.get(f"/v1/jobs/{job['id']}{path}", headers=bob)
        assert response.status_code == 404, path
    assert api.get("/v1/jobs", headers=bob).json()["items"] == []


def test_tokens_are_stored_hashed(settings, alice):
    token = alice["Authorization"].removeprefix("Bearer ")
    engine = make_engine(settings.sql_url)
    with engine.connect() as connection:
        stored = connection.execute(select(ApiTokenRow.token_sha256)).scalars().all()
    engine.dispose()
    assert stored and token not in stored and all(len(value) == 64 for value in stored)


def test_list_pages_newest_first_with_a_cursor(api, alice):
    ids = [api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"] for _ in range(5)]
    seen, cursor = [], None
    while True:
        page = api.get("/v1/jobs", params={"limit": 2, **({"cursor": cursor} if cursor else {})}, headers=alice).json()
        seen += [job["id"] for job in page["items"]]
        cursor = page["next_cursor"]
        if cursor is None:
            break
    assert seen == list(reversed(ids))
    assert api.get("/v1/jobs", params={"cursor": "garbage"}, headers=alice).status_code == 422


def test_health_and_readiness(api):
    assert api.get("/healthz").status_code == 200
    assert api.get("/readyz").json() == {"status": "ok"}
