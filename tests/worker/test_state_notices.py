"""A worker's job-state notices (worker/state_notices.py) against the real Redis: a notice that
a job is no longer simply running wakes that job's watch and no other, and the subscription
survives its connection being cut."""

from __future__ import annotations

import secrets

import pytest
import redis

from devstack import REDIS_URL, wait_until
from trainjobs.worker.state_notices import StateNotices


@pytest.fixture
def notices():
    listener = StateNotices(REDIS_URL, f"tjtest-{secrets.token_hex(4)}").start()
    yield listener
    listener.close()


@pytest.fixture
def announcer():
    client = redis.Redis.from_url(REDIS_URL)
    yield client
    client.close()


def subscription_ids(client: redis.Redis, notices: StateNotices) -> set[int]:
    """The ids of the listener's subscribed connections (its client is named after its channel)."""
    return {
        int(entry["id"])
        for entry in client.client_list(_type="pubsub")
        if entry["name"] == f"notices:{notices.channel}"
    }


def test_a_notice_wakes_the_watch_of_the_job_it_names_when_it_is_no_longer_just_running(notices, announcer):
    wait_until(lambda: subscription_ids(announcer, notices), 10, what="the subscription")
    with notices.watch("j1") as first, notices.watch("j2") as second:
        announcer.publish(notices.channel, "j1 running")  # a new epoch, say: no news to the watch
        announcer.publish(notices.channel, "not a notice")
        announcer.publish(notices.channel, "j2 queued")  # requeued: its lease is gone
        assert second.wait(10)
        assert not first.is_set()  # j1's notice came first, and woke nothing
        announcer.publish(notices.channel, "j1 cancelling")
        assert first.wait(10)


def test_the_subscription_comes_back_after_its_connection_is_cut(notices, announcer):
    wait_until(lambda: subscription_ids(announcer, notices), 10, what="the subscription")
    (cut,) = subscription_ids(announcer, notices)
    assert announcer.client_kill_filter(_id=cut) == 1
    wait_until(lambda: subscription_ids(announcer, notices) - {cut}, 10, what="a new subscription")
    with notices.watch("j1") as woken:
        announcer.publish(notices.channel, "j1 cancelling")
        assert woken.wait(10)
