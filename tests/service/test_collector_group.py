"""The collectors' consumer group lost in each way it can be (destroyed, its stream deleted,
Redis restarted without persistence): the collector makes it again and goes on applying, on the
real Redis (a private one where it is restarted) and real SQL."""

from __future__ import annotations

import pytest
import redis

from devstack import REDIS_URL, PrivateRedis, job_sessions
from tests.service.test_collector import make_job, metrics
from trainjobs.contract.events import JobEvent
from trainjobs.contract.redis_keys import RedisKeys
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import epoch_metrics
from trainjobs.service.collector import GROUP, EventCollector


def recorded_epochs(sessions, job_id: str) -> list[int]:
    with transaction(sessions) as session:
        return [row.epoch for row in epoch_metrics.for_job(session, job_id)]


def poll_until_recorded(collector, sessions, job_id: str, epochs: list[int], polls: int = 10) -> list[int]:
    for _ in range(polls):
        collector.poll(block_ms=50)
        if recorded_epochs(sessions, job_id) == epochs:
            break
    return recorded_epochs(sessions, job_id)


@pytest.mark.parametrize("loss", ["group destroyed", "stream deleted"])
def test_a_lost_consumer_group_is_made_again_and_collection_goes_on(database_url, namespace, loss):
    sessions = job_sessions(database_url, namespace)
    job_id = make_job(sessions)
    client, keys = redis.Redis.from_url(REDIS_URL), RedisKeys(namespace)
    collector = EventCollector(client, sessions, keys, consumer="host-a")
    client.xadd(keys.events, JobEvent.of(job_id, 1, metrics(1, 3.0)).to_stream_fields())
    assert poll_until_recorded(collector, sessions, job_id, [1]) == [1]

    if loss == "group destroyed":
        client.xgroup_destroy(keys.events, GROUP)
    else:
        client.delete(keys.events)
    client.xadd(keys.events, JobEvent.of(job_id, 1, metrics(2, 2.0)).to_stream_fields())
    assert poll_until_recorded(collector, sessions, job_id, [1, 2]) == [1, 2]


def test_a_redis_restarted_without_its_data_gets_the_group_again(database_url, namespace, tmp_path):
    server = PrivateRedis(tmp_path / "redis", persist=False)
    (tmp_path / "redis").mkdir()
    server.start()
    try:
        sessions = job_sessions(database_url, namespace, redis_url=server.url)
        job_id = make_job(sessions)
        client, keys = redis.Redis.from_url(server.url), RedisKeys(namespace)
        collector = EventCollector(client, sessions, keys, consumer="host-a")
        client.xadd(keys.events, JobEvent.of(job_id, 1, metrics(1, 3.0)).to_stream_fields())
        assert poll_until_recorded(collector, sessions, job_id, [1]) == [1]

        server.stop()
        server.start()  # empty: no stream, no group
        assert not client.exists(keys.events)
        client.xadd(keys.events, JobEvent.of(job_id, 1, metrics(2, 2.0)).to_stream_fields())
        assert poll_until_recorded(collector, sessions, job_id, [1, 2]) == [1, 2]
    finally:
        server.stop()
