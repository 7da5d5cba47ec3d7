"""Several API processes (`TRAINJOBS_API_WORKERS=2`, the default on this 2-core machine): one of
them at a time runs the collector and the sweeps, so each event a job reports is applied once,
and the lead passes on when its holder dies."""

from __future__ import annotations

import collections
import os
import signal

import pytest
import redis
from sqlalchemy import select

from devstack import REDIS_URL, descendants, pid_alive, tiny_wavenet_spec, wait_for_terminal, wait_until
from trainjobs.contract.redis_keys import RedisKeys
from trainjobs.jobs.db import make_engine
from trainjobs.jobs.tables import JobEventRow

pytestmark = pytest.mark.e2e


def leader_pid(client: redis.Redis, namespace: str) -> int | None:
    holder = client.get(RedisKeys(namespace).background_leader)
    return int(holder.decode().split(":")[1]) if holder else None


def events_of(database_url: str, job_id: str) -> list[tuple[int, str, dict]]:
    engine = make_engine(database_url)
    try:
        with engine.connect() as connection:
            query = select(JobEventRow.seq, JobEventRow.kind, JobEventRow.data).where(JobEventRow.job_id == job_id)
            return [tuple(row) for row in connection.execute(query.order_by(JobEventRow.seq))]
    finally:
        engine.dispose()


def assert_applied_once(database_url: str, job_id: str, epochs: int) -> None:
    events = events_of(database_url, job_id)
    assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1))
    kinds = collections.Counter(kind for _, kind, _ in events)
    assert sorted(data["epoch"] for _, kind, data in events if kind == "metrics") == list(range(1, epochs + 1))
    checkpoints = [data["id"] for _, kind, data in events if kind == "checkpoint"]
    assert checkpoints and len(checkpoints) == len(set(checkpoints))
    states = [data["state"] for _, kind, data in events if kind == "state"]
    assert states.count("succeeded") == 1 and states.count("running") >= 1
    progress = [repr(sorted(data.items())) for _, kind, data in events if kind == "progress"]
    assert len(progress) == len(set(progress))
    assert kinds["metrics"] == epochs


def test_two_api_processes_apply_each_event_once_and_hand_the_lead_on(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, TRAINJOBS_API_WORKERS="2")
    client = redis.Redis.from_url(REDIS_URL)
    servers = wait_until(
        lambda: [pid for pid in descendants(stack.api.pid) if b"spawn_main" in _cmdline(pid)] or None,
        30,
        what="the API's worker processes",
    )
    assert len(servers) == 2
    first_leader = wait_until(lambda: leader_pid(client, stack.namespace), 30, what="a leader")
    assert first_leader in servers

    api = stack.client(stack.token())
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(epochs=4)).json()["id"]
    assert wait_for_terminal(api, job_id)["state"] == "succeeded"
    assert_applied_once(sqlite_url, job_id, epochs=4)

    os.kill(first_leader, signal.SIGKILL)
    wait_until(lambda: not pid_alive(first_leader), 10, what="the leader gone")
    second_leader = wait_until(
        lambda: (pid := leader_pid(client, stack.namespace)) not in (None, first_leader) and pid,
        30,
        what="another process to lead",
    )
    assert second_leader in descendants(stack.api.pid)
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(epochs=3)).json()["id"]
    assert wait_for_terminal(api, job_id)["state"] == "succeeded"
    assert_applied_once(sqlite_url, job_id, epochs=3)
    assert client.xlen(RedisKeys(stack.namespace).dead_letters) == 0
    client.close()


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as file:
            return file.read()
    except OSError:
        return b""
