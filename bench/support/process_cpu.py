"""Where the CPUs go while a job trains: every process's CPU time and, for the ranks, the time
they waited for a core (the run-queue wait, from /proc/<pid>/schedstat), sampled across a run
and summed by role. Linux only; read from outside, so it costs the measured processes nothing."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

ROLES = ("ranks", "launcher", "worker", "api", "redis", "sql", "other")


def role_of(cmdline: str, parent_cmdline: str) -> str:
    if "trainjobs.cli api" in parent_cmdline:
        return "api"  # one of several API processes, spawned by the API's supervisor
    # A rank forked from a launcher's fork server has that Python for parent; in a sandbox, the fork
    # server's own parents (prlimit, bubblewrap, setpriv) carry its command line too.
    forked = _is_python(parent_cmdline) and "multiprocessing.forkserver" in parent_cmdline and "forkserver" in cmdline
    if "spawn_main" in cmdline or forked:
        return "ranks"  # a plain script's spawned rank, or a rank forked from a launcher's fork server
    if "trainjobs.worker.launcher" in cmdline or "multiprocessing." in cmdline:
        return "launcher"  # a launcher, its fork server and resource tracker
    for marker, role in (("trainjobs.cli worker", "worker"), ("trainjobs.cli api", "api")):
        if marker in cmdline:
            return role
    if cmdline.startswith("redis-server"):
        return "redis"
    if "postgres" in cmdline:
        return "sql"
    return "other"


def _is_python(cmdline: str) -> bool:
    return Path(cmdline.split(" ", 1)[0]).name.startswith("python")


def read_process(pid: str) -> tuple[str, int, float, float] | None:
    """(cmdline, parent pid, seconds on a cpu, seconds waiting for one) of a process, all threads."""
    base = Path("/proc") / pid
    try:
        cmdline = (base / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        stat = (base / "stat").read_text()
        ran = waited = 0
        for task in (base / "task").iterdir():
            on_cpu, on_queue, _slices = (task / "schedstat").read_text().split()
            ran, waited = ran + int(on_cpu), waited + int(on_queue)
    except (OSError, ValueError):
        return None
    parent = int(stat[stat.rindex(")") + 2 :].split()[1])
    return cmdline, parent, ran / 1e9, waited / 1e9


class ProcessCpu:
    """`with ProcessCpu() as cpu: ...`, then `cpu.summary()`: per role, cores used on average
    over the span and, for the ranks, the share of their time spent waiting for a core."""

    def __init__(self, every_seconds: float = 1.0):
        self.every_seconds = every_seconds
        self._first: dict[str, tuple[str, int, float, float]] = {}
        self._last: dict[str, tuple[str, int, float, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> ProcessCpu:
        self._started = time.monotonic()
        self._sample()
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._sample()
        self.seconds = time.monotonic() - self._started

    def _run(self) -> None:
        while not self._stop.wait(self.every_seconds):
            self._sample()

    def _sample(self) -> None:
        for pid in os.listdir("/proc"):
            if pid.isdigit() and (read := read_process(pid)) is not None:
                self._first.setdefault(pid, read)
                self._last[pid] = read

    def summary(self) -> dict[str, float]:
        cmdlines = {pid: read[0] for pid, read in self._last.items()}
        cpu = dict.fromkeys(ROLES, 0.0)
        rank_ran = rank_waited = 0.0
        for pid, (cmdline, parent, ran, waited) in self._last.items():
            _, _, ran_before, waited_before = self._first[pid]
            role = role_of(cmdline, cmdlines.get(str(parent), ""))
            cpu[role] += ran - ran_before
            if role == "ranks":
                rank_ran += ran - ran_before
                rank_waited += waited - waited_before
        figures = {f"{role}_cores": round(seconds / self.seconds, 4) for role, seconds in cpu.items()}
        figures["ranks_waiting_fraction"] = round(rank_waited / (rank_ran + rank_waited), 4) if rank_ran else 0.0
        return figures


def _busy_and_total() -> tuple[int, int]:
    fields = [int(value) for value in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = fields[3] + fields[4]  # idle and iowait
    return sum(fields) - idle, sum(fields)


def wait_until_quiet(busy_below: float = 0.1, max_seconds: float = 60.0) -> float:
    """Wait until the machine's CPUs were busy less than `busy_below` of one second (a launcher
    the worker warms after a job, say, has finished importing); give up after `max_seconds`.
    Returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() - started < max_seconds:
        busy_before, total_before = _busy_and_total()
        time.sleep(1.0)
        busy, total = _busy_and_total()
        if total > total_before and (busy - busy_before) / (total - total_before) < busy_below:
            break
    return time.monotonic() - started
