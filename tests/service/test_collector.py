"""The collector on the real Redis stream and real SQL: at-least-once delivery, exactly-once rows."""

import io
import time

import redis

from devstack import REDIS_URL, PrivateRedis, job_sessions, tiny_wavenet_spec
from trainjobs.contract.checkpoints import checkpoint_id, checkpoint_path
from trainjobs.contract.events import CheckpointRecord, CheckpointRemoved, EpochMetrics, JobEvent, StateChange
from trainjobs.contract.redis_keys import RedisKeys
from trainjobs.contract.spec import JobSpec
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import checkpoints, epoch_metrics, jobs
from trainjobs.service.auth import Principal
from trainjobs.service.collector import EventCollector
from trainjobs.service.jobs import submit


class NoDispatch:
    def send_committed(self, job_id, device):
        pass


def make_job(sessions) -> str:
    with transaction(sessions) as session:
        job, _ = submit(session, Principal("alice", False), JobSpec.model_validate(tiny_wavenet_spec()), NoDispatch())
        session.info.pop("on_commit", None)
        return job.id


def metrics(epoch: int, loss: float) -> EpochMetrics:
    return EpochMetrics(
        epoch=epoch, train_loss=loss, val_loss=loss, lr=0.01, epoch_seconds=1.0, samples_per_second=10.0
    )


def test_events_delivered_twice_are_stored_once(database_url, namespace):
    sessions = job_sessions(database_url, namespace)
    job_id = make_job(sessions)
    client = redis.Redis.from_url(REDIS_URL)
    keys = RedisKeys(namespace)
    sent = [metrics(1, 3.0), metrics(2, 2.0), metrics(2, 2.0), metrics(1, 3.0)]
    for payload in sent:
        client.xadd(keys.events, JobEvent.of(job_id, 1, payload).to_stream_fields())
    collector = EventCollector(client, sessions, keys, consumer="test")
    while collector.poll(block_ms=100):
        pass

    with transaction(sessions) as session:
        rows = epoch_metrics.for_job(session, job_id)
        assert [(row.epoch, row.data["train_loss"]) for row in rows] == [(1, 3.0), (2, 2.0)]
        job = jobs.get(session, job_id)
        assert job.epoch == 2 and job.metrics["train_loss"] == 2.0
    assert client.xlen(keys.events) == 0  # acknowledged and removed after the commit


def test_a_consumer_that_died_before_acknowledging_has_its_events_applied_on_restart(database_url, namespace):
    sessions = job_sessions(database_url, namespace)
    job_id = make_job(sessions)
    client = redis.Redis.from_url(REDIS_URL)
    keys = RedisKeys(namespace)
    client.xadd(keys.events, JobEvent.of(job_id, 1, metrics(1, 3.0)).to_stream_fields())
    collector = EventCollector(client, sessions, keys, consumer="host-a")
    collector._ensure_group()
    # Delivered to host-a, which then dies before applying it (no ack).
    assert client.xreadgroup("collectors", "host-a", {keys.events: ">"}, count=10)

    restarted = EventCollector(client, sessions, keys, consumer="host-a")
    assert restarted.poll(block_ms=100) == 1
    with transaction(sessions) as session:
        assert [row.epoch for row in epoch_metrics.for_job(session, job_id)] == [1]


def test_entries_another_consumer_left_unacknowledged_are_taken_over_once_stale(database_url, namespace):
    sessions = job_sessions(database_url, namespace)
    job_id = make_job(sessions)
    client = redis.Redis.from_url(REDIS_URL)
    keys = RedisKeys(namespace)
    survivor = EventCollector(client, sessions, keys, consumer="host-b", stale_after_ms=600)
    assert survivor.poll(block_ms=50) == 0  # its first look: nothing is waiting yet
    client.xadd(keys.events, JobEvent.of(job_id, 1, metrics(1, 3.0)).to_stream_fields())
    # Delivered to host-a, which dies before applying it (no ack): the entry is pending, not new.
    assert client.xreadgroup("collectors", "host-a", {keys.events: ">"}, count=10)
    assert survivor.poll(block_ms=50) == 0  # not stale yet

    deadline = time.monotonic() + 5
    taken = 0
    while not taken and time.monotonic() < deadline:
        taken = survivor.poll(block_ms=50)
    assert taken == 1
    with transaction(sessions) as session:
        assert [row.epoch for row in epoch_metrics.for_job(session, job_id)] == [1]
    assert client.xlen(keys.events) == 0


def reclaim_calls(client: redis.Redis) -> int:
    stats = client.info("commandstats")
    return int(stats.get("cmdstat_xautoclaim", {}).get("calls", 0))


def test_an_idle_collector_looks_for_pending_entries_on_its_first_poll_then_only_every_few_seconds(
    database_url, namespace, tmp_path
):
    sessions = job_sessions(database_url, namespace)
    server = PrivateRedis(tmp_path, persist=False)  # its command counts are this test's alone
    server.start()
    try:
        client = redis.Redis.from_url(server.url)
        collector = EventCollector(client, sessions, RedisKeys(namespace), consumer="host-a", stale_after_ms=30_000)
        collector.poll(block_ms=10)
        assert reclaim_calls(client) == 1  # the first poll: a restart's pending entries
        for _ in range(5):
            assert collector.poll(block_ms=10) == 0
        assert reclaim_calls(client) == 1  # the idle polls that follow wait on the stream only
    finally:
        server.stop()


def test_state_from_an_older_attempt_is_ignored_and_terminal_states_stick(database_url, namespace):
    from trainjobs.service.collector import apply_event

    sessions = job_sessions(database_url, namespace)
    job_id = make_job(sessions)
    with transaction(sessions) as session:
        job = jobs.get(session, job_id)
        job.state, job.attempt = "running", 2  # as if a first worker was lost
    with transaction(sessions) as session:
        apply_event(session, JobEvent.of(job_id, 1, StateChange(state="failed", stop_reason="error", error="old")))
    with transaction(sessions) as session:
        assert jobs.get(session, job_id).state == "running"
        apply_event(session, JobEvent.of(job_id, 2, StateChange(state="succeeded", stop_reason="completed")))
    with transaction(sessions) as session:
        apply_event(session, JobEvent.of(job_id, 2, StateChange(state="failed", stop_reason="error")))
    with transaction(sessions) as session:
        job = jobs.get(session, job_id)
        assert (job.state, job.stop_reason) == ("succeeded", "completed") and job.finished_at is not None


def test_a_new_best_checkpoint_unmarks_the_previous_one(database_url, namespace):
    from datetime import UTC, datetime

    from trainjobs.service.collector import apply_event

    sessions = job_sessions(database_url, namespace)
    job_id = make_job(sessions)

    def record(epoch: int, best: bool) -> CheckpointRecord:
        return CheckpointRecord(
            id=checkpoint_id(job_id, epoch),
            epoch=epoch,
            size_bytes=1,
            sha256="0" * 64,
            is_best=best,
            created_at=datetime.now(UTC),
            path=checkpoint_path(job_id, checkpoint_id(job_id, epoch), 1),
        )

    for epoch in (1, 2):
        with transaction(sessions) as session:
            apply_event(session, JobEvent.of(job_id, 1, record(epoch, best=True)))
    with transaction(sessions) as session:
        assert [(row.epoch, row.is_best) for row in checkpoints.for_job(session, job_id)] == [(1, False), (2, True)]


def test_checkpoint_rows_of_an_attempt_the_job_moved_past_are_left_alone(database_url, namespace):
    """A first attempt that lives on after the job was requeued (its worker cut off from SQL)
    must not add rows, nor rotate out the rows of the attempt that took over."""
    from datetime import UTC, datetime

    from trainjobs.service.collector import apply_event

    sessions = job_sessions(database_url, namespace)
    job_id = make_job(sessions)

    def record(epoch: int, attempt: int) -> CheckpointRecord:
        checkpoint = checkpoint_id(job_id, epoch)
        return CheckpointRecord(
            id=checkpoint, epoch=epoch, size_bytes=1, sha256="0" * 64, is_best=False,
            created_at=datetime.now(UTC), path=checkpoint_path(job_id, checkpoint, attempt),
        )  # fmt: skip

    with transaction(sessions) as session:
        job = jobs.get(session, job_id)
        job.state, job.attempt = "running", 2  # the first worker was lost; attempt 2 runs
    for event in (
        JobEvent.of(job_id, 2, record(1, attempt=2)),
        JobEvent.of(job_id, 1, record(2, attempt=1)),  # the old attempt's later epoch
        JobEvent.of(job_id, 1, CheckpointRemoved(id=checkpoint_id(job_id, 1))),  # ... and its rotation
    ):
        with transaction(sessions) as session:
            apply_event(session, event)
    with transaction(sessions) as session:
        rows = [(row.id, row.path) for row in checkpoints.for_job(session, job_id)]
    assert rows == [(checkpoint_id(job_id, 1), checkpoint_path(job_id, checkpoint_id(job_id, 1), 2))]


def test_a_left_behind_attempt_s_rotation_deletes_no_file_the_current_attempt_lists(database_url, namespace, tmp_path):
    """Found by the chaos run: attempt 2 resumed from attempt 1's epoch-1 checkpoint (its row
    keeps attempt 1's path); attempt 1, cut off but still training, rotated that checkpoint out
    and deleted its file: listed, and a 404 to download. Files are now deleted by the collector,
    after the row, for the job's current attempt only."""
    from datetime import UTC, datetime

    from trainjobs.store import CheckpointStore

    sessions = job_sessions(database_url, namespace)
    job_id = make_job(sessions)
    store = CheckpointStore(str(tmp_path / "store"))
    first = checkpoint_id(job_id, 1)
    inherited = checkpoint_path(job_id, first, 1)
    store.put_stream(io.BytesIO(b"weights"), inherited)
    record = CheckpointRecord(
        id=first, epoch=1, size_bytes=7, sha256="0" * 64, is_best=False, created_at=datetime.now(UTC), path=inherited
    )
    client = redis.Redis.from_url(REDIS_URL)
    keys = RedisKeys(namespace)
    collector = EventCollector(client, sessions, keys, consumer="test", store=store)

    def deliver(event: JobEvent) -> None:
        client.xadd(keys.events, event.to_stream_fields())
        while collector.poll(block_ms=100):
            pass

    deliver(JobEvent.of(job_id, 1, record))
    with transaction(sessions) as session:
        job = jobs.get(session, job_id)
        job.state, job.attempt = "running", 2  # requeued; attempt 2 resumes from `first`
    deliver(JobEvent.of(job_id, 1, CheckpointRemoved(id=first)))  # attempt 1, left behind, rotates it out
    assert store.size(inherited) == 7
    with transaction(sessions) as session:
        assert [row.id for row in checkpoints.for_job(session, job_id)] == [first]

    deliver(JobEvent.of(job_id, 2, CheckpointRemoved(id=first)))  # the current attempt's rotation
    assert store.size(inherited) is None
    with transaction(sessions) as session:
        assert checkpoints.for_job(session, job_id) == []
