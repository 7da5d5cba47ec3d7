"""One API process at a time leads the background loop (service/leadership.py), on real Redis."""

from __future__ import annotations

import time

from devstack import REDIS_URL
from trainjobs.contract.redis_keys import RedisKeys
from trainjobs.service.leadership import Leadership


def test_one_holder_at_a_time_and_the_next_takes_over_when_it_releases(namespace):
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    first, second = (Leadership(client, RedisKeys(namespace).background_leader, ttl_seconds=5) for _ in range(2))
    assert first.hold() and not second.hold()
    assert first.hold()  # renewing is holding
    assert client.get(RedisKeys(namespace).background_leader).decode() == first.holder
    first.release()
    assert second.hold() and not first.hold()
    client.close()


def test_a_holder_that_stops_renewing_loses_the_lead_after_its_ttl(namespace):
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    stalled, standby = (Leadership(client, RedisKeys(namespace).background_leader, ttl_seconds=0.5) for _ in range(2))
    assert stalled.hold()
    assert not standby.hold()
    time.sleep(0.8)
    assert standby.hold() and not stalled.hold()
    stalled.release()  # releasing what another holds changes nothing
    assert client.get(RedisKeys(namespace).background_leader).decode() == standby.holder
    client.close()


def test_without_redis_nobody_leads():
    import redis

    unreachable = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.5)
    assert not Leadership(unreachable, "x:background-leader").hold()
