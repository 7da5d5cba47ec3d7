"""Open streams (`/events`, `/logs?follow=true`) against the real app served by uvicorn over
HTTP, real SQL and Redis: caps per owner and per process (429 with Retry-After), and one reader
per job however many streams follow it."""

from __future__ import annotations

import threading
import time
from contextlib import ExitStack, contextmanager

import httpx
import pytest
import uvicorn
from sqlalchemy import Engine, event

from devstack import free_port, tiny_wavenet_spec, wait_until


@contextmanager
def served(settings):
    """The app in a uvicorn server on a thread of this process (so its SQL can be counted here)."""
    from trainjobs.service.api.app import create_app

    port = free_port()
    server = uvicorn.Server(uvicorn.Config(create_app(settings), host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    wait_until(lambda: server.started, 20, what="the server")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def open_streams(url: str, headers: dict, path: str, count: int):
    """`count` streams of `path` held open (their first bytes read), each on its own connection."""
    with ExitStack() as stack:
        answers = []
        for _ in range(count):
            client = stack.enter_context(httpx.Client(base_url=url, headers=headers, timeout=30))
            answer = stack.enter_context(client.stream("GET", path))
            answers.append(answer)
        yield answers


def test_streams_past_an_owner_s_cap_or_the_process_s_are_refused_with_retry_after(settings, alice, bob, api):
    settings.streams_per_owner, settings.streams_per_process = 2, 3
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    bobs = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=bob).json()["id"]
    with served(settings) as url, open_streams(url, alice, f"/v1/jobs/{job_id}/events", 2) as held:
        assert [answer.status_code for answer in held] == [200, 200]
        refused = httpx.get(f"{url}/v1/jobs/{job_id}/logs", params={"follow": "true"}, headers=alice)
        assert refused.status_code == 429 and int(refused.headers["Retry-After"]) > 0
        assert "alice" in refused.json()["detail"]
        with open_streams(url, bob, f"/v1/jobs/{bobs}/events", 1) as bob_held:
            assert bob_held[0].status_code == 200  # another owner has places of their own
            full = httpx.get(f"{url}/v1/jobs/{bobs}/events", headers=bob)
            assert full.status_code == 429 and "process" in full.json()["detail"]
    with served(settings) as url, open_streams(url, alice, f"/v1/jobs/{job_id}/events", 2) as held:
        assert [answer.status_code for answer in held] == [200, 200]  # closed streams gave their places back


@pytest.fixture
def event_reads():
    """How many times any engine of this process has read job_events."""
    reads = []

    def count(_connection, _cursor, statement, *_args):
        if "FROM job_events" in statement:
            reads.append(time.monotonic())

    event.listen(Engine, "before_cursor_execute", count)
    yield reads
    event.remove(Engine, "before_cursor_execute", count)


def reads_while_open(url: str, headers: dict, path: str, streams: int, reads: list, seconds: float = 3.0) -> int:
    with open_streams(url, headers, path, streams):
        time.sleep(0.5)  # every stream connected and caught up
        start = len(reads)
        time.sleep(seconds)
        return len(reads) - start


def test_one_reader_serves_every_stream_of_a_job(settings, alice, api, event_reads):
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    path = f"/v1/jobs/{job_id}/events"
    with served(settings) as url:
        one = reads_while_open(url, alice, path, 1, event_reads)
        ten = reads_while_open(url, alice, path, 10, event_reads)
    assert one >= 2  # it does poll (twice a second)
    assert ten <= 2 * one + 2, (one, ten)
