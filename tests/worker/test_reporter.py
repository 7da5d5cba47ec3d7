"""The event reporter (worker/reporter.py) against a Redis of its own that restarts without its
data: what the collector had not applied is sent again; what it applied is not."""

from __future__ import annotations

import json
import threading

import pytest
import redis

from devstack import PrivateRedis
from trainjobs.contract.events import EpochMetrics, LogLines, StateChange
from trainjobs.worker.reporter import EventReporter

STREAM = "test:events"


@pytest.fixture
def forgetful_redis(tmp_path):
    server = PrivateRedis(tmp_path, persist=False)
    server.start()
    yield server
    server.stop()


def restart(server: PrivateRedis) -> None:
    server.stop()
    server.start()


def epoch(number: int) -> EpochMetrics:
    return EpochMetrics(epoch=number, train_loss=1.0, val_loss=1.0, lr=0.1, epoch_seconds=1.0, samples_per_second=1.0)


def epochs_in_stream(client: redis.Redis) -> list[int]:
    return [
        json.loads(fields[b"data"])["epoch"] for _, fields in client.xrange(STREAM) if fields[b"kind"] == b"metrics"
    ]


def apply_everything(client: redis.Redis) -> None:
    """What the collector does once an entry's change is committed: delete it."""
    for entry_id, _ in client.xrange(STREAM):
        client.xdel(STREAM, entry_id)


def test_events_not_applied_are_sent_again_in_order_after_redis_lost_its_data(forgetful_redis):
    client = redis.Redis.from_url(forgetful_redis.url)
    reporter = EventReporter(client, STREAM, "j1", attempt=1, patience_seconds=10)
    for number in (1, 2, 3):
        reporter.send(epoch(number))
    restart(forgetful_redis)
    assert epochs_in_stream(client) == []
    reporter.send(epoch(4))
    assert epochs_in_stream(client) == [1, 2, 3, 4]
    assert reporter.sent_again == 3


def test_events_applied_are_not_sent_again(forgetful_redis):
    client = redis.Redis.from_url(forgetful_redis.url)
    reporter = EventReporter(client, STREAM, "j1", attempt=1, patience_seconds=10)
    reporter.send(epoch(1))
    reporter.send(epoch(2))
    apply_everything(client)
    assert reporter.flush(timeout=2)
    restart(forgetful_redis)
    reporter.send(epoch(3))
    assert epochs_in_stream(client) == [3]
    assert reporter.sent_again == 0


def test_progress_and_log_lines_are_not_kept(forgetful_redis):
    client = redis.Redis.from_url(forgetful_redis.url)
    reporter = EventReporter(client, STREAM, "j1", attempt=1, patience_seconds=10)
    reporter.send(LogLines(rank=0, first_line=1, lines=["hello"]))
    assert reporter.flush(timeout=0.5)


def test_flush_waits_for_the_collector_and_sends_again_what_a_restart_lost(forgetful_redis):
    client = redis.Redis.from_url(forgetful_redis.url)
    reporter = EventReporter(client, STREAM, "j1", attempt=1, patience_seconds=10)
    reporter.send(epoch(1))
    reporter.send(StateChange(state="succeeded", stop_reason="completed"))
    restart(forgetful_redis)
    applied: list[bytes] = []

    def collector() -> None:  # comes back a moment later, and applies what it finds
        threading.Event().wait(0.5)
        entries = client.xrange(STREAM)
        applied.extend(fields[b"kind"] for _, fields in entries)
        apply_everything(client)

    thread = threading.Thread(target=collector)
    thread.start()
    assert reporter.flush(timeout=10)
    thread.join()
    assert applied == [b"metrics", b"state"]


def test_flush_gives_up_after_its_timeout_while_nobody_applies(forgetful_redis):
    client = redis.Redis.from_url(forgetful_redis.url)
    reporter = EventReporter(client, STREAM, "j1", attempt=1, patience_seconds=10)
    reporter.send(epoch(1))
    assert not reporter.flush(timeout=0.3)
