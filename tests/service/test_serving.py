"""Serving the API (service/api/serving.py): real `trainjobs api` processes, one or several."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from devstack import descendants, free_port, pid_alive, wait_until
from trainjobs.service.api.serving import HEALTH_CHECK_SECONDS, serve_in_processes

pytestmark = pytest.mark.e2e


def voluntary_switches(pid: int) -> int:
    """How often a process's main thread has gone to sleep: its wakeups."""
    status = Path(f"/proc/{pid}/task/{pid}/status").read_text()
    return int(status.split("voluntary_ctxt_switches:")[1].split()[0])


def servers_of(stack) -> list[int]:
    return sorted(pid for pid in descendants(stack.api.pid) if b"spawn_main" in cmdline(pid))


def cmdline(pid: int) -> bytes:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:  # it exited since it was listed (a server being replaced)
        return b""


def answers(stack) -> bool:
    return httpx.get(f"{stack.url}/healthz", timeout=5).status_code == 200


@pytest.fixture
def two_processes(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, with_worker=False, TRAINJOBS_API_WORKERS="2")
    wait_until(lambda: len(servers_of(stack)) == 2 or None, 30, what="two API processes")
    return stack


def started_and_quiet(pids: list[int]) -> bool:
    """Each process's main thread woke at most 3 times in the last second: done starting (a server
    just spawned imports, connects to SQL and Redis and takes or tries for the lead, waking on each
    round trip), and settled into its idle pace. A server that never settles (uvicorn's own, ten
    wakeups a second) never passes."""
    before = [voluntary_switches(pid) for pid in pids]
    time.sleep(1.0)
    return all(voluntary_switches(pid) - count <= 3 for pid, count in zip(pids, before, strict=True))


def test_an_idle_api_keeps_house_once_a_second_not_ten_times(stack_on, sqlite_url):
    """uvicorn's own server wakes ten times a second; a wakeup is a rank's lost time on its core."""
    stack = stack_on(sqlite_url, with_worker=False)  # one process: the server runs in its main thread
    wait_until(lambda: started_and_quiet([stack.api.pid]), 30, interval=0, what="the API started and settled")
    before = voluntary_switches(stack.api.pid)
    time.sleep(5)
    assert voluntary_switches(stack.api.pid) - before <= 15  # about 5; uvicorn's own: about 50


def test_several_api_processes_and_their_supervisor_sleep_while_idle(two_processes):
    stack = two_processes
    watched = [stack.api.pid, *servers_of(stack)]
    wait_until(lambda: started_and_quiet(watched), 30, interval=0, what="the API processes started and settled")
    before = [voluntary_switches(pid) for pid in watched]
    time.sleep(5)
    woke = [voluntary_switches(pid) - count for pid, count in zip(watched, before, strict=True)]
    # The supervisor: its health check every 10 s (uvicorn's: a ping to each every 0.5 s). Each
    # server's main thread: its housekeeping once a second (uvicorn's: ten times).
    assert woke[0] <= 3 and all(count <= 15 for count in woke[1:]), woke


def test_a_dead_api_process_is_replaced_while_the_other_answers(two_processes):
    stack = two_processes
    dead = servers_of(stack)[0]
    os.kill(dead, signal.SIGKILL)
    assert answers(stack)
    wait_until(lambda: dead not in servers_of(stack) and len(servers_of(stack)) == 2, 30, what="a new API process")
    assert answers(stack)


def test_an_api_process_that_stops_answering_is_ended_and_replaced(two_processes):
    stack = two_processes
    stuck = servers_of(stack)[0]
    os.kill(stuck, signal.SIGSTOP)  # alive, and answering nothing
    try:
        wait_until(lambda: not pid_alive(stuck), HEALTH_CHECK_SECONDS + 15, what="the stuck process ended")
    finally:
        if pid_alive(stuck):
            os.kill(stuck, signal.SIGCONT)
    wait_until(lambda: len(servers_of(stack)) == 2 or None, 30, what="a new API process")
    assert answers(stack)


def test_sigterm_ends_the_supervisor_and_every_api_process_promptly(two_processes):
    stack = two_processes
    everyone = [stack.api.pid, *servers_of(stack)]
    started = time.monotonic()
    stack.api.terminate()
    assert stack.api.wait(timeout=10) == 0
    wait_until(lambda: not any(pid_alive(pid) for pid in everyone), 10, what="every API process gone")
    assert time.monotonic() - started < 10


def test_a_server_that_cannot_start_stops_the_supervisor_with_uvicorn_s_startup_failure_code():
    config = uvicorn.Config("tests.no_such_module:app", port=free_port(), log_level="critical")
    started = time.monotonic()
    with pytest.raises(SystemExit) as stopped:
        serve_in_processes(config, 2)
    assert stopped.value.code == 3
    assert time.monotonic() - started < 30
