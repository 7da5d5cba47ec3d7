"""The test lanes (`pytest --lane NAME`; make check, make test, make chaos), spelled here only.

- **check**: the tests that start no stack (no API, worker or launcher process) and take seconds,
  for a developer to run while thinking (the Makefile runs the static checks before it);
- **test**: the end-to-end tests, the real API, worker, Redis, SQL and sandboxed ranks;
- **chaos**: the long runs: the benchmarks in their tiny form, the short chaos run, and the fault
  tests that each wait out leases, lost hosts or a Redis restarted from its files.

Every test is in exactly one lane, so the three lanes together run the whole suite (as a plain
`pytest` does); each prints its time at its end against its goal.
"""

from __future__ import annotations

import time

import pytest

_STARTED = pytest.StashKey[float]()  # when the session started
GOAL_SECONDS = {"check": 180, "test": 900, "chaos": None}
CHAOS = (  # paths under tests/, as pytest names a test's file
    "tests/bench/",
    "tests/e2e/test_chaos.py",
    "tests/e2e/test_lease_faults.py",
    "tests/e2e/test_preemption_faults.py",
    "tests/e2e/test_redis_data_loss.py",
    "tests/e2e/test_fleet.py",
    "tests/e2e/test_nodes.py",
    "tests/e2e/test_hosts.py",
)
# Tests without the e2e mark that still take tens of seconds (real DDP ranks, a sandbox, a
# launcher's fork server): the test lane's, so that check stays under its goal.
SLOW_WITHOUT_A_STACK = ("tests/worker/test_launcher.py", "tests/worker/test_install_steps.py")


def lane_of(item: pytest.Item) -> str:
    path = item.nodeid.split("::", 1)[0]
    if path.startswith(CHAOS):
        return "chaos"
    if item.get_closest_marker("e2e") or path.startswith(SLOW_WITHOUT_A_STACK):
        return "test"
    return "check"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--lane", choices=sorted(GOAL_SECONDS), help="run only this lane's tests (tests/lanes.py)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    lane = config.getoption("--lane")
    if lane is None:
        return
    kept = [item for item in items if lane_of(item) == lane]
    config.hook.pytest_deselected(items=[item for item in items if lane_of(item) != lane])
    items[:] = kept


def pytest_sessionstart(session: pytest.Session) -> None:
    session.config.stash[_STARTED] = time.monotonic()


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:
    lane = config.getoption("--lane")
    if lane is None:
        return
    seconds = time.monotonic() - config.stash[_STARTED]
    goal = GOAL_SECONDS[lane]
    against = f" (goal: under {goal // 60} min)" if goal else ""
    terminalreporter.write_line(f"lane {lane}: {seconds // 60:.0f} min {seconds % 60:.0f} s{against}", bold=True)
