"""What one careless or hostile caller can send the API, on the real app, real SQL (SQLite and
PostgreSQL) and real Redis: a clear 4xx naming the field, never a 500, and nothing stored."""

from __future__ import annotations

import json
import math
import time

import hypothesis
import hypothesis.strategies as st
import pytest
import redis
from fastapi.testclient import TestClient

from devstack import new_token, tiny_wavenet_spec
from tests.service.test_jobs_api import count_jobs
from trainjobs.contract.workers import WorkerStatus
from trainjobs.service import fleet
from trainjobs.service.api.app import create_app


def body_with(**raw_fields: str) -> str:
    """The tiny spec as JSON text, with fields set to raw JSON tokens (1e999, NaN...)."""
    spec = tiny_wavenet_spec(**{name: "RAW-" + name for name in raw_fields})
    text = json.dumps(spec)
    for name, token in raw_fields.items():
        text = text.replace(f'"RAW-{name}"', token)
    return text


def post_raw(api, body: str | bytes, headers: dict[str, str]):
    return api.post("/v1/jobs", content=body, headers={**headers, "Content-Type": "application/json"})


@pytest.mark.parametrize(
    "raw_fields, field",
    [
        ({"optimizer": '{"name": "adamw", "lr": 0.01, "weight_decay": 1e999}'}, ["optimizer", "weight_decay"]),
        ({"grad_clip_norm": "1e999"}, ["grad_clip_norm"]),
        ({"early_stopping": '{"patience": 2, "min_delta": Infinity}'}, ["early_stopping", "min_delta"]),
        ({"optimizer": '{"name": "adamw", "lr": NaN}'}, ["optimizer", "lr"]),
    ],
    ids=["weight_decay-1e999", "grad_clip_norm-1e999", "min_delta-Infinity", "lr-NaN"],
)
def test_a_non_finite_number_is_a_422_naming_the_field_and_stores_nothing(api, alice, settings, raw_fields, field):
    response = post_raw(api, body_with(**raw_fields), alice)
    assert response.status_code == 422, response.text
    assert any(problem["loc"][-len(field) :] == field for problem in response.json()["detail"])
    assert count_jobs(settings) == 0


def test_without_a_valid_token_any_body_gets_401(api, alice):
    for headers in ({}, {"Authorization": "Bearer tj_not-a-token"}):
        for body in (body_with(optimizer='{"name": "adamw", "lr": NaN}'), "{not json", b"\xff\xfe", "[" * 5000):
            response = post_raw(api, body, headers)
            assert response.status_code == 401, (headers, body[:20], response.text)
            assert "optimizer" not in response.text and "datasets" not in response.text


def test_a_chunked_body_over_the_limit_is_413_and_odd_bodies_are_422(api, alice, settings):
    def chunks():
        for _ in range(3):
            yield b" " * settings.max_request_bytes

    assert post_raw(api, chunks(), alice).status_code == 413
    assert post_raw(api, "[" * 100_000 + "]" * 100_000, alice).status_code == 422
    latin1 = json.dumps(tiny_wavenet_spec(name="caf\u00e9"), ensure_ascii=False).encode("latin-1")
    not_utf8 = post_raw(api, latin1, alice)
    assert not_utf8.status_code == 422 and "UTF-8" in not_utf8.text
    assert count_jobs(settings) == 0


def test_last_event_id_must_be_ascii_digits_of_an_id_this_api_sent(api, alice):
    job = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()
    for bad in ("\u00b2", "1" * 30, "-1"):
        response = api.get(f"/v1/jobs/{job['id']}/events", headers={**alice, "Last-Event-ID": bad.encode()})
        assert response.status_code == 422, bad
        assert response.json()["detail"][0]["loc"] == ["header", "Last-Event-ID"]


@pytest.mark.parametrize("name", ["evil\u001b]0;owned\u0007", "right\u202eleft", "tab\tbed"])
def test_a_job_name_with_control_or_bidirectional_characters_is_refused(api, alice, name):
    response = api.post("/v1/jobs", json=tiny_wavenet_spec(name=name), headers=alice)
    assert response.status_code == 422 and response.json()["detail"][0]["loc"][-1] == "name"


def test_answers_carry_security_headers_and_docs_are_off_by_default(api, alice):
    for path in ("/ui/", "/v1/jobs", "/healthz"):
        headers = api.get(path, headers=alice).headers
        assert "default-src 'self'" in headers["content-security-policy"]
        assert headers["x-frame-options"] == "DENY" and headers["x-content-type-options"] == "nosniff"
    assert api.get("/docs").status_code == 404
    assert api.get("/openapi.json").status_code == 200


def test_cors_is_off_by_default_and_on_for_the_origins_named(settings):
    origin = "https://dash.example"
    preflight = {
        "Origin": origin,
        "Access-Control-Request-Method": "GET",
        "Access-Control-Request-Headers": "authorization",
    }
    with TestClient(create_app(settings)) as api:
        assert "access-control-allow-origin" not in api.options("/v1/jobs", headers=preflight).headers
    with TestClient(create_app(settings.model_copy(update={"cors_origins": origin}))) as api:
        answer = api.options("/v1/jobs", headers=preflight)
        assert answer.status_code == 200 and answer.headers["access-control-allow-origin"] == origin


def heartbeat(settings, hostname: str, jobs: list[str]) -> None:
    status = WorkerStatus(hostname=hostname, device="cpu", slots=2, busy=len(jobs), jobs=jobs, last_seen=time.time())
    redis.Redis.from_url(settings.redis_url).hset(settings.keys.workers, hostname, status.model_dump_json())


def test_workers_show_each_caller_only_their_own_job_ids_and_skip_a_malformed_heartbeat(api, alice, bob, settings):
    alice_job = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    bob_job = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=bob).json()["id"]
    heartbeat(settings, "host-1", [alice_job, bob_job])
    redis.Redis.from_url(settings.redis_url).hset(settings.keys.workers, "host-bad", '{"hostname": 5}')
    admin = {"Authorization": f"Bearer {new_token(settings.sql_url, 'root', admin=True)}"}

    def jobs_seen(headers) -> list[list[str]]:
        response = api.get("/v1/workers", headers=headers)
        assert response.status_code == 200, response.text
        return [worker["jobs"] for worker in response.json()["items"]]

    assert jobs_seen(alice) == [[alice_job]]
    assert jobs_seen(bob) == [[bob_job]]
    assert jobs_seen(admin) == [[alice_job, bob_job]]


def test_a_heartbeat_from_the_far_future_is_skipped_and_the_fleet_still_lists(api, alice, settings):
    """last_seen 1e18 once made every GET /v1/workers a 500 (no datetime holds it)."""
    heartbeat(settings, "host-1", [])
    client = redis.Redis.from_url(settings.redis_url)
    far = WorkerStatus(hostname="host-far", device="cpu", slots=1, busy=0, jobs=[], last_seen=0).model_dump()
    client.hset(settings.keys.workers, "host-far", json.dumps({**far, "last_seen": 1e18}))
    response = api.get("/v1/workers", headers=alice)
    assert response.status_code == 200, response.text
    assert [worker["hostname"] for worker in response.json()["items"]] == ["host-1"]


def test_workers_silent_past_the_forget_time_are_dropped_and_a_returning_one_is_kept(settings):
    client = redis.Redis.from_url(settings.redis_url)
    now = time.time()
    for hostname, silent in (("retired", 2 * 86400), ("lost-an-hour", 3600), ("alive", 0)):
        status = WorkerStatus(hostname=hostname, device="cpu", slots=1, busy=0, jobs=[], last_seen=now - silent)
        client.hset(settings.keys.workers, hostname, status.model_dump_json())
    assert fleet.forget_long_lost(client, settings.keys.workers, 86400) == 1
    assert sorted(name.decode() for name in client.hkeys(settings.keys.workers)) == ["alive", "lost-an-hour"]


@hypothesis.settings(
    max_examples=60, deadline=None, suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture]
)
@hypothesis.given(
    lr=st.floats(min_value=1e-300, max_value=1.7e308),
    gpus=st.integers(1, 64),
    accumulation_steps=st.integers(1, 1024),
    batch_size=st.integers(1, 1_000_000),  # each within its own bound (contract/spec.py)
    lr_scaling=st.sampled_from(["linear", "sqrt", "none"]),
    epochs=st.integers(1, 10_000),
)
def test_fields_fine_alone_but_not_together_are_a_422_never_a_500(
    api, alice, lr, gpus, accumulation_steps, batch_size, lr_scaling, epochs
):
    """Fuzzed as combinations, not one field at a time: lr 1e308 is a finite number; scaled by
    gpus x accumulation_steps it may not be, and then the answer is a 422 naming optimizer.lr."""
    spec = tiny_wavenet_spec(
        optimizer={"name": "sgd", "lr": lr},
        gpus=gpus,
        accumulation_steps=accumulation_steps,
        batch_size=batch_size,
        lr_scaling=lr_scaling,
        epochs=epochs,
    )
    answer = api.post("/v1/jobs", json=spec, headers=alice)
    assert answer.status_code in (201, 422), answer.text
    k = gpus * accumulation_steps
    overflows = not math.isfinite(lr * {"linear": k, "sqrt": math.sqrt(k), "none": 1}[lr_scaling])
    if answer.status_code == 201:
        assert not overflows and math.isfinite(answer.json()["effective"]["lr"])
        api.post(f"/v1/jobs/{answer.json()['id']}/cancel", headers=alice)
    elif overflows:
        assert "optimizer.lr" in answer.text, answer.text


def test_an_effective_lr_past_a_float_is_a_422_naming_optimizer_lr(api, alice):
    spec = tiny_wavenet_spec(optimizer={"name": "sgd", "lr": 1e308}, gpus=2, accumulation_steps=2, lr_scaling="linear")
    answer = api.post("/v1/jobs", json=spec, headers=alice)
    assert answer.status_code == 422 and "optimizer.lr" in answer.text, answer.text
