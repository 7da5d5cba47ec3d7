"""The chaos run (issue 36): a fleet of its own under a stream of jobs and a seeded stream of
faults, then every promise checked. `python -m bench chaos` runs it long; tests/e2e/test_chaos.py
runs it short."""

from __future__ import annotations

import time
from pathlib import Path

from devstack.chaos.faults import FaultInjector
from devstack.chaos.fleet import ChaosFleet, wait_for_api
from devstack.chaos.invariants import check, failures, settle
from devstack.chaos.observer import RankObserver
from devstack.chaos.stream import JobStream

__all__ = ["failures", "run_chaos"]

TICK_SECONDS = 0.5


def run_chaos(workdir: Path, seconds: float, seed: int, drain_seconds: float = 300, say=print) -> dict:
    """Jobs and faults for `seconds`, then no new fault and no new job until every job has ended
    (at most `drain_seconds`), then the figures (`failures(figures)` lists the broken promises)."""
    fleet = ChaosFleet(workdir)
    try:
        fleet.start()
        stream = JobStream(fleet, seed)
        observer = RankObserver(stream.job_ids).start()
        injector = FaultInjector(fleet, seed)
        started = time.monotonic()
        next_report = started + 30
        while time.monotonic() - started < seconds:
            stream.tick()
            injector.tick()
            time.sleep(TICK_SECONDS)
            if time.monotonic() >= next_report:
                next_report += 30
                say(_progress(started, stream, injector))
        injector.finish()
        wait_for_api(fleet)
        say(f"faults stopped after {time.monotonic() - started:.0f} s; waiting for {len(stream.open)} jobs to end")
        settle(fleet, stream, drain_seconds)
        figures = check(fleet, stream, observer.stop())
        figures.update(
            seed=seed,
            seconds=round(seconds),
            faults=dict(injector.injected),
            faults_without_target=dict(injector.missed),
            **{"workers that exited on their own": injector.exited_on_their_own},
            job_kinds=dict(_kinds(stream)),
            journal=injector.journal,
        )
        return figures
    finally:
        fleet.stop()


def _kinds(stream: JobStream) -> dict[str, int]:
    counts: dict[str, int] = {}
    for job in stream.jobs.values():
        counts[job.kind] = counts.get(job.kind, 0) + 1
    return counts


def _progress(started: float, stream: JobStream, injector: FaultInjector) -> str:
    faults = sum(injector.injected.values())
    elapsed = time.monotonic() - started
    return f"{elapsed:.0f} s: {len(stream.jobs)} jobs submitted, {len(stream.open)} open, {faults} faults injected"
