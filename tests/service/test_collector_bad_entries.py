"""The collector survives any single bad stream entry, on
the real Redis stream and real SQL: an entry that cannot apply is set aside in the dead-letter
stream with its error, and every real event behind it is applied exactly once."""

from __future__ import annotations

import json
from datetime import UTC, datetime

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from devstack import REDIS_URL, job_sessions
from tests.service.test_collector import make_job, metrics
from trainjobs.contract.checkpoints import checkpoint_id, checkpoint_path
from trainjobs.contract.events import CheckpointRecord, JobEvent
from trainjobs.contract.redis_keys import RedisKeys
from trainjobs.jobs.db import make_engine, transaction
from trainjobs.jobs.repositories import checkpoints, epoch_metrics, job_events
from trainjobs.service.collector import EventCollector


def checkpoint(job_id: str, epoch: int) -> CheckpointRecord:
    return CheckpointRecord(
        id=checkpoint_id(job_id, epoch),
        epoch=epoch,
        size_bytes=1,
        sha256="0" * 64,
        is_best=False,
        created_at=datetime.now(UTC),
        path=checkpoint_path(job_id, checkpoint_id(job_id, epoch), 1),
    )


def raw(job_id: str, kind: str, data: object, attempt: str = "1") -> dict[str, str]:
    return {
        "job_id": job_id,
        "attempt": attempt,
        "kind": kind,
        "data": data if isinstance(data, str) else json.dumps(data),
    }


def drain(collector: EventCollector, polls: int = 20) -> None:
    for _ in range(polls):
        if not collector.poll(block_ms=50):
            return


@pytest.fixture
def stream_setup(database_url, namespace):
    sessions = job_sessions(database_url, namespace)
    client = redis.Redis.from_url(REDIS_URL)
    keys = RedisKeys(namespace)
    return sessions, client, keys


def entries_that_cannot_apply(alice_job: str, bob_job: str) -> list[dict]:
    """Malformed, out of bounds, or speaking for another job's checkpoints (alice's events)."""
    good = metrics(1, 2.0).model_dump(mode="json")
    return [
        raw(
            alice_job,
            "metrics",
            '{"epoch": 1, "train_loss": 1.0, "val_loss": NaN, "lr": 0.1, "epoch_seconds": 1, "samples_per_second": 1}',
        ),  # a diverged loss
        raw(alice_job, "metrics", {}),  # data {}
        raw(alice_job, "metrics", {**good, "epoch": 10**20}),  # epoch past any column
        raw(alice_job, "checkpoint", {**checkpoint(alice_job, 1).model_dump(mode="json"), "id": "x" * 100}),
        raw(alice_job, "checkpoint", checkpoint(bob_job, 1).model_dump(mode="json")),  # bob's row, to alice
        raw(
            alice_job,
            "checkpoint",
            {
                **checkpoint(alice_job, 2).model_dump(mode="json"),
                "path": checkpoint_path(bob_job, f"{bob_job}-e0001", 1),
            },
        ),  # bob's file
        raw(alice_job, "checkpoint_removed", {"id": f"{bob_job}-e0001"}),  # scoped to alice: no-op
        raw(alice_job, "nonsense", {}),
        {"junk": "\xff"},
    ]


def test_bad_entries_are_set_aside_and_the_events_behind_them_apply(stream_setup):
    sessions, client, keys = stream_setup
    alice_job, bob_job = make_job(sessions), make_job(sessions)
    # Bob's job has a checkpoint that a forged event must not move, repoint or delete.
    client.xadd(keys.events, JobEvent.of(bob_job, 1, checkpoint(bob_job, 1)).to_stream_fields())
    bad_entries = entries_that_cannot_apply(alice_job, bob_job)
    for entry in bad_entries:
        client.xadd(keys.events, entry)
    client.xadd(keys.events, JobEvent.of(alice_job, 1, metrics(1, 3.0)).to_stream_fields())

    collector = EventCollector(client, sessions, keys, consumer="test")
    drain(collector)

    with transaction(sessions) as session:
        assert [row.epoch for row in epoch_metrics.for_job(session, alice_job)] == [1]
        bobs = checkpoints.for_job(session, bob_job)
        assert [(row.id, row.job_id, row.path) for row in bobs] == [
            (f"{bob_job}-e0001", bob_job, checkpoint_path(bob_job, f"{bob_job}-e0001", 1))
        ]
        assert checkpoints.for_job(session, alice_job) == []
    # All but the scoped removal (which applied, and changed nothing) are set aside, with why.
    dead = client.xrange(keys.dead_letters)
    assert len(dead) == len(bad_entries) - 1
    assert all(b"error" in fields for _id, fields in dead)
    assert client.xlen(keys.events) == 0


def test_an_entry_whose_transaction_keeps_failing_is_set_aside_after_the_limit(stream_setup, database_url):
    sessions, client, keys = stream_setup
    poisoned, healthy = make_job(sessions), make_job(sessions)
    # A row SQL itself refuses for one job: a trigger stands for a constraint the event breaks.
    engine = make_engine(database_url)
    with engine.begin() as connection:
        if database_url.startswith("sqlite"):
            connection.execute(
                text(
                    f"CREATE TRIGGER poison BEFORE INSERT ON epoch_metrics WHEN NEW.job_id = '{poisoned}' "
                    "BEGIN SELECT RAISE(ABORT, 'poisoned row'); END"
                )
            )
        else:
            connection.execute(
                text(
                    "CREATE FUNCTION poison() RETURNS trigger AS $$ BEGIN "
                    f"IF NEW.job_id = '{poisoned}' THEN RAISE EXCEPTION 'poisoned row'; END IF; RETURN NEW; "
                    "END $$ LANGUAGE plpgsql"
                )
            )
            connection.execute(
                text("CREATE TRIGGER poison BEFORE INSERT ON epoch_metrics FOR EACH ROW EXECUTE FUNCTION poison()")
            )
    client.xadd(keys.events, JobEvent.of(poisoned, 1, metrics(1, 3.0)).to_stream_fields())
    client.xadd(keys.events, JobEvent.of(healthy, 1, metrics(1, 3.0)).to_stream_fields())

    collector = EventCollector(client, sessions, keys, consumer="test", max_failures=3)
    collector.poll(block_ms=50)
    with transaction(sessions) as session:  # the entry behind the failing one applied at once
        assert [row.epoch for row in epoch_metrics.for_job(session, healthy)] == [1]
    assert client.xlen(keys.dead_letters) == 0  # one failure: kept for another try
    drain(collector)
    dead = client.xrange(keys.dead_letters)
    assert len(dead) == 1 and b"failed 3 times" in dead[0][1][b"error"]
    assert client.xlen(keys.events) == 0


# ---- fuzz: garbage between real events --------------------------------------------------------

text_values = st.one_of(st.text(max_size=40), st.binary(max_size=40).map(lambda b: b.decode("latin-1")))
garbage_entry = st.one_of(
    st.dictionaries(text_values.filter(bool), text_values, min_size=1, max_size=5),
    st.fixed_dictionaries(
        {
            "job_id": st.one_of(st.just("JOB"), text_values),
            "attempt": st.one_of(st.just("1"), text_values, st.integers().map(str)),
            "kind": st.sampled_from(["metrics", "checkpoint", "checkpoint_removed", "state", "other"]),
            "data": st.one_of(
                text_values,
                st.recursive(
                    st.none() | st.booleans() | st.floats() | st.integers() | st.text(max_size=10),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                    max_leaves=8,
                ).map(lambda value: json.dumps(value)),
            ),
        }
    ),
)


@given(
    garbage=st.lists(garbage_entry, min_size=1, max_size=12), where=st.lists(st.integers(0, 12), min_size=3, max_size=3)
)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_garbage_between_real_events_never_stops_one_of_them(stream_setup, garbage, where):
    sessions, client, keys = stream_setup
    job_id = make_job(sessions)
    real = [JobEvent.of(job_id, 1, metrics(epoch, 1.0 / epoch)).to_stream_fields() for epoch in (1, 2, 3)]
    entries = [{**entry, "job_id": job_id} if entry.get("job_id") == "JOB" else entry for entry in garbage]
    for event, position in zip(real, sorted(where), strict=True):
        entries.insert(min(position, len(entries)), event)
    for entry in entries:
        client.xadd(keys.events, entry)

    drain(EventCollector(client, sessions, keys, consumer="fuzz"), polls=50)

    with transaction(sessions) as session:
        recorded = [row.epoch for row in epoch_metrics.for_job(session, job_id)]
        metrics_events = [event for event in job_events.after(session, job_id, 0) if event.kind == "metrics"]
    assert recorded == [1, 2, 3] and len(metrics_events) == 3
    assert client.xlen(keys.events) == 0
