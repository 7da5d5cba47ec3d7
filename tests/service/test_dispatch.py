"""The outbox: a job stored while Redis is down is still dispatched once Redis is back."""

import json
import logging

import redis

from devstack import PrivateRedis, job_sessions, tiny_wavenet_spec
from trainjobs.contract.clock import utcnow
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import dispatch_intents
from trainjobs.service import dispatch
from trainjobs.settings import Settings
from trainjobs.worker.devices import DevicePool
from trainjobs.worker.job_runner import JobRunner


def test_a_job_submitted_while_redis_is_down_is_dispatched_once_it_is_back(tmp_path, database_url, namespace):
    from fastapi.testclient import TestClient

    from devstack import new_token
    from trainjobs.service.api.app import create_app

    broker = PrivateRedis(tmp_path)
    settings = Settings(
        home=tmp_path,
        database_url=database_url,
        redis_url=broker.url,
        namespace=namespace,
        run_background=False,
        outbox_grace_seconds=0,
    )
    headers = {"Authorization": f"Bearer {new_token(database_url, 'alice')}"}
    with TestClient(create_app(settings)) as api:
        response = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=headers)  # Redis is not running
        assert response.status_code == 201
        job_id = response.json()["id"]
        assert api.get(f"/v1/jobs/{job_id}", headers=headers).json()["state"] == "queued"

    sessions = job_sessions(database_url, namespace)
    with transaction(sessions) as session:
        assert [intent.job_id for intent in dispatch_intents.due(session, utcnow())] == [job_id]

    broker.start()
    try:
        dispatcher = dispatch.Dispatcher(settings, sessions)
        assert dispatch.sweep(dispatcher, grace_seconds=0) == 1
        queued = redis.Redis.from_url(broker.url).lrange(f"{namespace}.cpu", 0, -1)
        assert len(queued) == 1 and job_id in json.dumps(json.loads(queued[0]))
        with transaction(sessions) as session:
            assert dispatch_intents.due(session, utcnow()) == []
        assert dispatch.sweep(dispatcher, grace_seconds=0) == 0  # sent once, not again
    finally:
        broker.stop()


def test_a_message_for_a_job_without_a_row_is_dropped_with_a_log_line(tmp_path, sqlite_url, caplog, namespace):
    settings = Settings(home=tmp_path, database_url=sqlite_url)
    sent_again = []
    runner = JobRunner(
        settings,
        job_sessions(sqlite_url, namespace),
        DevicePool("cpu", [0, 1]),
        "w1",
        sent_again.append,
        live_workers=list,
        reporter=None,
    )
    with caplog.at_level(logging.WARNING, logger="trainjobs.worker.job_runner"):
        assert runner.run("j-does-not-exist") == "dropped"
    assert "unknown job j-does-not-exist" in caplog.text
    assert runner.pool.busy == 0 and sent_again == []
