"""Taking turns on the whole machine: two sides, each given by its root processes, run in turns
of `TURN_SECONDS`; one side runs while every process group of the other is stopped (SIGSTOP,
SIGCONT). The i-th rank of either side is pinned to core i. Each turn's start and end are
recorded (wall clock), and a side's rate over an epoch is the samples it trained in that epoch
over the seconds of its own turns inside the epoch's wall-clock window.

Stopped processes keep their sockets and timers: a turn is far inside every timeout the service
has (lease renewal, heartbeats, the process group's), and all are let go on the way out, whatever
happens."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

from bench.support.process_cpu import role_of

TURN_SECONDS = 0.2


class Side:
    """What one side runs, read from /proc: the process groups of its roots and of everything they
    started (except ours), and its ranks (bench/support/process_cpu.py's roles) in order of pid: a launcher
    forks its ranks and a script spawns them in rank order, so the i-th is rank i unless pids wrapped."""

    def __init__(self, roots: list[int]):
        table: dict[int, tuple[int, int, str]] = {}  # pid: (parent, group, command line)
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            fields = stat[stat.rindex(")") + 2 :].split()  # state, parent, group, ...
            table[int(entry)] = (int(fields[1]), int(fields[2]), cmdline)
        children: dict[int, list[int]] = {}
        for pid, (parent, _, _) in table.items():
            children.setdefault(parent, []).append(pid)
        found, todo = set(), [root for root in roots if root in table]
        while todo:
            pid = todo.pop()
            found.add(pid)
            todo.extend(children.get(pid, ()))
        self.groups = {table[pid][1] for pid in found} - {os.getpgrp()}
        self.ranks = sorted(
            pid for pid in found if role_of(table[pid][2], table.get(table[pid][0], (0, 0, ""))[2]) == "ranks"
        )


def signal_groups(groups: set[int], signum: int) -> None:
    for group in groups:
        try:
            os.killpg(group, signum)
        except ProcessLookupError:
            pass


def pin_ranks(ranks: list[int]) -> None:
    """Every thread of the i-th rank on core i: both sides' ranks on the same cores, so that a
    core faster than the other (its own neighbours on the host) favours neither side."""
    cores = sorted(os.sched_getaffinity(0))
    for index, pid in enumerate(ranks):
        core = {cores[index % len(cores)]}
        try:
            for task in os.listdir(f"/proc/{pid}/task"):
                os.sched_setaffinity(int(task), core)
        except OSError:  # the rank, or one of its threads, has just exited
            pass


class Turns:
    """Two sides, each given by its root processes, run in turns of `turn_seconds`: one side
    runs while every process group of the other is stopped; `first` (by default the first
    named) takes the first turn. `turns[side]` holds each of that side's turns as (start, end),
    wall clock."""

    def __init__(
        self, sides: dict[str, Callable[[], list[int]]], turn_seconds: float = TURN_SECONDS, first: str | None = None
    ):
        if first is not None and first not in sides:
            raise ValueError(f"first={first!r} names no side; the sides are {sorted(sides)}")
        self.sides = sides
        self.order = sorted(sides, key=lambda side: side != first)  # stable: the rest keep their order
        self.turn_seconds = turn_seconds
        self.turns: dict[str, list[tuple[float, float]]] = {side: [] for side in sides}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="turns", daemon=True)
        self._groups: dict[str, set[int]] = {side: set() for side in sides}
        # Every group a side ever had: one can leave the side's tree while stopped (a fork server
        # or resource tracker whose parent exited is orphaned), and must still be let go at the end.
        self._seen: dict[str, set[int]] = {side: set() for side in sides}

    def __enter__(self) -> Turns:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()
        for side, roots in self.sides.items():  # nobody stays stopped, whatever happened
            signal_groups(self._seen[side] | Side(roots()).groups, signal.SIGCONT)

    def _run(self) -> None:
        order = self.order
        turn = 0
        while not self._stop.is_set():
            side = order[turn % len(order)]
            for name in order:
                now = Side(self.sides[name]())
                self._groups[name] = now.groups
                self._seen[name] |= now.groups
                if name == side:
                    pin_ranks(now.ranks)  # new threads inherit it; a rank started since is pinned now
                else:
                    signal_groups(now.groups, signal.SIGSTOP)
            started = time.time()
            signal_groups(self._groups[side], signal.SIGCONT)
            self._stop.wait(self.turn_seconds)
            # A process group started during the turn (a launcher's, say) is found before the
            # other side's turn starts, and stopped then.
            signal_groups(self._groups[side], signal.SIGSTOP)
            self.turns[side].append((started, time.time()))
            turn += 1

    def seconds_of(self, side: str, start: float, end: float) -> float:
        """The seconds of `side`'s turns inside the wall-clock window [start, end]."""
        return sum(max(0.0, min(end, to) - max(start, since)) for since, to in self.turns[side])


def processes_taking_turns(
    sides: dict[str, tuple[subprocess.Popen, list[int]]], first_turn: str | None = None
) -> Turns:
    """Each side (its process, and the roots of all it runs) taking turns until every side's
    process has exited; one still running on the way out is killed."""
    try:
        with Turns(
            {name: (lambda roots=roots: roots) for name, (_, roots) in sides.items()}, first=first_turn
        ) as turns:
            for process, _ in sides.values():
                wait_for_plain(process)
    finally:
        for process, _ in sides.values():
            if process.poll() is None:
                process.kill()
    return turns


def wait_for_plain(process: subprocess.Popen, timeout: float = 1800) -> None:
    if process.wait(timeout=timeout) != 0:
        raise RuntimeError(f"the plain loop exited with {process.returncode}")


def rates(turns: Turns, side: str, epochs: list[tuple[float, float, float]]) -> list[float]:
    """Samples per second of each epoch, over the seconds of the side's own turns in it."""
    return [samples / turns.seconds_of(side, start, end) for start, end, samples in epochs]
