"""Polling a job reads Redis, not SQL, and never answers with a version SQL has moved past
(service/job_cache.py), on SQLite and PostgreSQL, through the real app, Redis and database."""

from __future__ import annotations

import asyncio

import pytest
from sqlalchemy import Engine, event

from devstack import new_token, tiny_wavenet_spec, wait_until
from trainjobs.connections import async_redis_client, redis_client
from trainjobs.contract.clock import utcnow
from trainjobs.contract.events import EpochMetrics
from trainjobs.jobs import lifecycle
from trainjobs.jobs.db import make_engine, make_session_factory, transaction
from trainjobs.jobs.job_cache import CachedJob, JobCache, JobCacheWriter
from trainjobs.jobs.repositories import api_tokens, jobs
from trainjobs.jobs.tables import ApiTokenRow
from trainjobs.service.auth import hash_token


@pytest.fixture
def token_sessions(settings):
    """Sessions that change no job (tokens only)."""
    engine = make_engine(settings.sql_url)
    yield make_session_factory(engine, job_cache=None)
    engine.dispose()


class KilledAfterCommit(JobCacheWriter):
    """A writer whose process dies after its commit, before it publishes."""

    def publish(self, job_id: str, cached: CachedJob) -> None:
        pass


@pytest.fixture
def sql_statements():
    """Every statement any engine of this process sends, as it sends it."""
    sent: list[str] = []

    def record(_connection, _cursor, statement, *_args):
        sent.append(statement)

    event.listen(Engine, "before_cursor_execute", record)
    yield sent
    event.remove(Engine, "before_cursor_execute", record)


def cached_value(settings, job_id: str) -> bytes | None:
    client = redis_client(settings)
    try:
        return client.get(settings.keys.job(job_id))
    finally:
        client.close()


def test_polling_a_held_job_sends_no_sql(api, alice, sql_statements):
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    first = api.get(f"/v1/jobs/{job_id}", headers=alice)
    etag = first.headers["ETag"]

    sql_statements.clear()
    unchanged = api.get(f"/v1/jobs/{job_id}", headers={**alice, "If-None-Match": etag})
    again = api.get(f"/v1/jobs/{job_id}", headers=alice)
    assert unchanged.status_code == 304 and unchanged.headers["ETag"] == etag and unchanged.content == b""
    assert again.status_code == 200 and again.json() == first.json() and again.headers["ETag"] == etag
    assert sql_statements == []


def test_a_change_committed_by_another_process_is_the_next_polls_answer(api, alice, writer_sessions):
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    etag = api.get(f"/v1/jobs/{job_id}", headers=alice).headers["ETag"]

    with transaction(writer_sessions) as session:  # as a worker claims it
        lifecycle.claim(session, job_id, "w1", lease_seconds=30)
    running = api.get(f"/v1/jobs/{job_id}", headers={**alice, "If-None-Match": etag})
    assert running.status_code == 200 and running.json()["state"] == "running"

    with transaction(writer_sessions) as session:  # as the collector records an epoch
        job = jobs.get(session, job_id, for_update=True)
        metrics = EpochMetrics(
            epoch=1, train_loss=2.5, val_loss=2.6, lr=0.01, epoch_seconds=1.0, samples_per_second=10.0
        )
        lifecycle.record_epoch(session, job, 1, metrics)
    after_epoch = api.get(f"/v1/jobs/{job_id}", headers={**alice, "If-None-Match": running.headers["ETag"]})
    assert after_epoch.status_code == 200 and after_epoch.json()["epoch"] == 1
    assert after_epoch.json()["metrics"]["train_loss"] == 2.5


def test_while_a_change_is_being_committed_polls_go_to_sql(api, alice, settings, writer_sessions):
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    api.get(f"/v1/jobs/{job_id}", headers=alice)
    with transaction(writer_sessions) as session:
        lifecycle.claim(session, job_id, "w1", lease_seconds=30)
        session.flush()
        assert cached_value(settings, job_id).startswith(b"p")  # marked before the commit
    assert cached_value(settings, job_id).split(b"\n")[0].isdigit()  # published after it


def test_a_writer_that_died_between_its_commit_and_its_publish_leaves_polls_on_sql(api, alice, settings):
    """The writer's mark lands, its commit lands, its publish never comes (it was killed): the
    poll must not answer from the version Redis held before."""
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    etag = api.get(f"/v1/jobs/{job_id}", headers=alice).headers["ETag"]
    engine = make_engine(settings.sql_url)
    sessions = make_session_factory(engine, KilledAfterCommit(redis_client(settings), settings.keys))
    with transaction(sessions) as session:
        lifecycle.claim(session, job_id, "w1", lease_seconds=30)
    engine.dispose()
    answer = api.get(f"/v1/jobs/{job_id}", headers={**alice, "If-None-Match": etag})
    assert answer.status_code == 200 and answer.json()["state"] == "running"


def test_an_older_version_never_replaces_a_newer_one(settings):
    writer = JobCacheWriter(redis_client(settings), settings.keys)
    cache = JobCache(async_redis_client(settings), settings.keys)

    async def scenario():
        writer.publish("j1", CachedJob(6, "alice", b'{"v": 6}'))
        writer.publish("j1", CachedJob(5, "alice", b'{"v": 5}'))  # a slower writer
        newest = await cache.lookup("j1")
        writer.mark("j1", 7)
        await cache.remember("j1", newest)  # a reader that read SQL before the mark
        marked = await cache.lookup("j1")
        await cache.client.aclose()
        return newest, marked

    newest, marked = asyncio.run(scenario())
    assert (newest.seq, newest.owner, newest.document) == (6, "alice", b'{"v": 6}')
    assert marked is None


def test_a_deleted_job_polled_with_its_last_etag_is_404(api, alice, writer_sessions):
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    api.post(f"/v1/jobs/{job_id}/cancel", headers=alice)
    etag = api.get(f"/v1/jobs/{job_id}", headers=alice).headers["ETag"]
    assert api.delete(f"/v1/jobs/{job_id}", headers=alice).status_code == 204
    assert api.get(f"/v1/jobs/{job_id}", headers={**alice, "If-None-Match": etag}).status_code == 404
    assert api.get(f"/v1/jobs/{job_id}", headers=alice).status_code == 404


def test_another_owner_with_the_right_etag_gets_404_not_304(api, alice, bob):
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    etag = api.get(f"/v1/jobs/{job_id}", headers=alice).headers["ETag"]
    assert api.get(f"/v1/jobs/{job_id}", headers={**bob, "If-None-Match": etag}).status_code == 404
    assert api.get(f"/v1/jobs/{job_id}", headers=bob).status_code == 404


def test_a_revoked_token_stops_working_within_the_cache_time(settings, token_sessions):
    from fastapi.testclient import TestClient

    from trainjobs.service.api.app import create_app

    settings.token_cache_seconds = 1.0
    token = new_token(settings.sql_url, "carol")
    with TestClient(create_app(settings)) as api:
        headers = {"Authorization": f"Bearer {token}"}
        assert api.get("/v1/jobs", headers=headers).status_code == 200
        with transaction(token_sessions) as session:
            assert api_tokens.revoke_all_of(session, "carol") == 1
        wait_until(lambda: api.get("/v1/jobs", headers=headers).status_code == 401, 5, what="the revoked token refused")

        # A refusal is not remembered: a token refused once works as soon as it exists.
        later = {"Authorization": "Bearer tj_made-later"}
        assert api.get("/v1/jobs", headers=later).status_code == 401
        with transaction(token_sessions) as session:
            row = ApiTokenRow(
                id="t-later",
                owner="carol",
                is_admin=False,
                token_sha256=hash_token("tj_made-later"),
                created_at=utcnow(),
            )
            api_tokens.add(session, row)
        assert api.get("/v1/jobs", headers=later).status_code == 200


@pytest.fixture
def state_notices(settings):
    """What the job-state channel carries (trainjobs.contract.notices), as a worker hears it."""
    client = redis_client(settings)
    pubsub = client.pubsub()
    pubsub.subscribe(settings.keys.job_state_channel)

    def heard() -> list[str]:
        names = []
        while (message := pubsub.get_message(timeout=0.5)) is not None:
            if message["type"] == "message":
                names.append(message["data"].decode())
        return names

    yield heard
    pubsub.close()
    client.close()


def test_each_committed_change_of_a_job_is_announced_with_its_state_and_a_rollback_is_not(
    api, alice, writer_sessions, state_notices
):
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    with transaction(writer_sessions) as session:  # as a worker claims it
        lifecycle.claim(session, job_id, "w1", lease_seconds=30)
    with transaction(writer_sessions) as session:  # as the collector records an epoch
        job = jobs.get(session, job_id, for_update=True)
        metrics = EpochMetrics(
            epoch=1, train_loss=2.5, val_loss=2.6, lr=0.01, epoch_seconds=1.0, samples_per_second=10.0
        )
        lifecycle.record_epoch(session, job, 1, metrics)
    assert state_notices() == [f"{job_id} queued", f"{job_id} running", f"{job_id} running"]

    with pytest.raises(RuntimeError), transaction(writer_sessions) as session:
        lifecycle.cancel(session, jobs.get(session, job_id, for_update=True))
        session.flush()
        raise RuntimeError("the transaction fails after its flush")
    assert state_notices() == []
    assert api.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "running"

    assert api.post(f"/v1/jobs/{job_id}/cancel", headers=alice).json()["state"] == "cancelling"
    assert state_notices() == [f"{job_id} cancelling"]


def test_a_transition_in_sessions_made_without_a_job_cache_refuses_to_run(api, alice, token_sessions):
    """No session factory can forget the job cache: a job change that nobody would publish fails
    instead of leaving polls on an old version."""
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    with pytest.raises(RuntimeError, match="cannot publish job changes"), transaction(token_sessions) as session:
        lifecycle.cancel(session, jobs.get(session, job_id, for_update=True))
    assert api.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "queued"
