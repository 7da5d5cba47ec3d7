"""The chaos run (issue 36), long: devstack.chaos's fleet (its own PostgreSQL and Redis, the API in
two processes, three workers on hosts of their own) under a seeded stream of jobs and faults for
`minutes`, then every promise checked. The same seed replays the same faults (kinds, moments,
durations); tests/e2e/test_chaos.py runs the short form."""

from __future__ import annotations

import tempfile
from pathlib import Path

from devstack.chaos import failures, run_chaos


def run(minutes: float = 30, seed: int = 36) -> dict:
    with tempfile.TemporaryDirectory(prefix="trainjobs-chaos-") as scratch:
        figures = run_chaos(Path(scratch), seconds=minutes * 60, seed=seed, say=lambda line: print(f"chaos  {line}"))
    for line in figures["journal"]:
        print(f"chaos  {line}")
    figures["broken"] = failures(figures)
    print(f"chaos  broken promises: {figures['broken'] or 'none'}", flush=True)
    return {"chaos": figures}
