"""The chaos run, short (issue 36): two minutes of jobs from three owners (one and two ranks, two
nodes, accumulation, their own code, urgent ones that preempt, some cancelled on purpose) on a
fleet of its own while a seeded injector kills workers, launchers, ranks and API processes,
restarts Redis (with and without its data) and PostgreSQL, holds PostgreSQL's write lock, cuts a
worker's network and fills its run folder. Then every promise is checked: no epoch recorded
twice or lost, no job with two attempts alive at once, every checkpoint downloads with its
sha256, nothing left running or leased, every job ended, no worker that exited on its own.
`python -m bench chaos` is the long form."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from devstack.chaos import failures, run_chaos

pytestmark = pytest.mark.e2e

SECONDS = 120
SEED = 7
# Printed here, not asserted: none now (the three that the 30-minute run at 8d17104 found are
# fixed: workers exiting at Redis restarts, epochs lost with Redis's data, two attempts at once).
OPEN_FINDINGS: tuple[str, ...] = ()


def test_a_stream_of_mixed_faults_breaks_no_promise(tmp_path):
    if shutil.which("runuser") is None or subprocess.run(["ip", "netns", "list"], capture_output=True).returncode:
        pytest.skip("the chaos run needs root: network namespaces, tmpfs mounts, a PostgreSQL of its own")
    figures = run_chaos(tmp_path, seconds=SECONDS, seed=SEED)
    print("\n".join(figures["journal"]))
    broken = failures(figures)
    print("open findings:", {name: broken.pop(name) for name in OPEN_FINDINGS if name in broken})
    assert broken == {}, figures
    assert figures["jobs"] >= 10 and figures["ended"].get("succeeded", 0) >= 5, figures
    assert sum(figures["faults"].values()) >= 10, figures
