"""Taking turns: the service's job and the plain loop (bench/plain_ddp.py) alive at once, on the
same spec, taking turns on the whole machine a fraction of a second at a time; and, as the
control, two plain loops taking turns the same way.

Why: this machine's speed drifts by 5 to 15% over seconds and minutes (other tenants of the host
share its caches and memory bandwidth), so runs minutes apart (bench/overhead.py's rounds) differ
by more than the 1% to be resolved; and two loops that train at the same moment
(bench/side_by_side.py) still differ by a few %, each on its own core with its own neighbours.
Here both loops use the same cores, in turns of `TURN_SECONDS`: a drift slower than that falls on
both alike, and so does whatever one core has that the other has not. What is left is the
process itself: two processes of the same script, taking turns, still differ by a few % from one
pair to the next, and keep that difference over their whole run (where their memory landed, most
likely). So the unit here is the pair: each pair is a fresh plain process and a fresh job, and
there are `PAIRS` of them per configuration, pooled at the end over all configurations.

How: the plain loop runs as a shell would start it (`python -m bench.plain_ddp`, a session of
its own), and the service's job is posted once the plain loop's first step is done, so that both
train from about the same moment (service_and_plain says why). One side runs and the other is stopped
(SIGSTOP to each of its process groups, SIGCONT to take its turn): the service's side is all of
it (the API, the worker, the job's launcher, fork server and ranks), so whatever the service does
while a job trains is paid in its own turns. What it does on a clock (sweeps, heartbeats, lease
renewals) falls due in the plain loop's turns too and is done in its own, so it is paid about twice
over: this harness leans against the service. The plain side is the script and its ranks. Redis
stays up for both, as it does in the overhead benchmark's plain runs. The i-th rank of either side
is pinned to core i. Each turn's start and end are recorded (wall clock), and a loop's rate over an
epoch is the samples it trained in that epoch over the seconds of its own turns inside the epoch's
wall-clock window. Epochs are paired by number, after the first (start-up, warm-up); a pair's
ratio is service / plain over those epochs. The service's epoch windows come from the job's own
reports, replayed from its event stream once it has ended: each epoch's training ends at rank 0's
end-of-epoch progress report (`at`) and lasts its `epoch_seconds`.

Stopped processes keep their sockets and timers: a turn is far inside every timeout the service
has (lease renewal, heartbeats, the process group's), and all are let go on the way out, whatever
happens.
"""

from __future__ import annotations

import json
import math
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from bench.overhead import CONFIGURATIONS, calibrated_clips, default_stack, wavenet_spec
from bench.process_cpu import role_of, wait_until_quiet
from devstack import sql_database

TURN_SECONDS = 0.2
EPOCHS = 2  # the first warms up; the second is timed
PAIRS = 8  # per configuration: one pair's spread is 1 to 2% (the control rows), a median of 8 under half that
CONTROLS = [(1, "fp32", 4), (2, "fp32", 4)]
ROOT = Path(__file__).resolve().parents[1]


class Side:
    """What one side runs, read from /proc: the process groups of its roots and of everything they
    started (except ours), and its ranks (bench/process_cpu.py's roles) in order of pid: a launcher
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


def plain_process(
    spec: dict, scratch: str, name: str, threads: int, stdout: int | None = None
) -> tuple[subprocess.Popen, Path]:
    spec_file, result_file = Path(scratch) / f"{name}.spec.json", Path(scratch) / f"{name}.result.json"
    spec_file.write_text(json.dumps(spec))
    result_file.unlink(missing_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.plain_ddp", str(spec_file), str(result_file), str(threads)],
        cwd=ROOT,
        start_new_session=True,
        stdout=stdout,
        text=True,
    )
    return process, result_file


def first_step_done(process: subprocess.Popen) -> threading.Event:
    """Set once the plain loop (started with its output piped) says its first optimizer step is
    done; its output is read to the end, so that it never blocks on a full pipe."""
    done = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("first optimizer step done"):
                done.set()

    threading.Thread(target=read, name="plain-output", daemon=True).start()
    return done


def plain_epochs(result_file: Path) -> list[tuple[float, float, float]]:
    """(start, end, samples) of each of the plain loop's epochs, wall clock."""
    result = json.loads(result_file.read_text())
    return [
        (start, end, samples)
        for (start, end), samples in zip(result["epoch_windows"], result["epoch_samples"], strict=True)
    ]


def service_epochs(client, job_id: str) -> list[tuple[float, float, float]]:
    """(start, end, samples) of each of the job's epochs: each ends at rank 0's end-of-epoch
    progress report (replayed from the job's event stream) and lasts its `epoch_seconds`."""
    ends: dict[int, float] = {}
    event = None
    with client.stream("GET", f"/v1/jobs/{job_id}/events") as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:") and event == "progress":
                progress = json.loads(line.partition(":")[2])
                if progress["step"] == progress["steps"]:
                    ends[progress["epoch"]] = datetime.fromisoformat(progress["at"]).timestamp()
    return epochs_of(job_id, ends, client.get(f"/v1/jobs/{job_id}/metrics").json()["items"])


def epochs_of(run: str, ends: dict[int, float], metrics: list[dict]) -> list[tuple[float, float, float]]:
    """(start, end, samples) of each epoch of a run's `metrics`, given when each ended (`ends`)."""
    epochs = []
    for row in metrics:
        end = ends.get(row["epoch"])
        if end is None:
            raise RuntimeError(f"{run}: no end-of-epoch progress report for epoch {row['epoch']}")
        epochs.append((end - row["epoch_seconds"], end, row["samples_per_second"] * row["epoch_seconds"]))
    return epochs


def rates(turns: Turns, side: str, epochs: list[tuple[float, float, float]]) -> list[float]:
    """Samples per second of each epoch, over the seconds of the side's own turns in it."""
    return [samples / turns.seconds_of(side, start, end) for start, end, samples in epochs]


def wait_for_job(client, job_id: str, timeout: float = 1800) -> dict:
    """Polled every 2 s: a poll that arrives while the service is stopped waits for its turn,
    and is served (and paid for) in the service's turn."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(2.0)
    raise TimeoutError(f"job {job_id} did not end within {timeout} s")


def wait_for_plain(process: subprocess.Popen, timeout: float = 1800) -> None:
    if process.wait(timeout=timeout) != 0:
        raise RuntimeError(f"the plain loop exited with {process.returncode}")


def service_and_plain(
    stack, client, spec: dict, scratch: str, threads: int, post_at_once: bool = False, first_turn: str = "service"
) -> dict:
    """One pair: a job through the service and a fresh plain loop, taking turns, training from
    about the same moment: the job is posted once the plain loop's first optimizer step is done.

    Why: a warm worker starts a job's ranks within a second, and the plain script takes seconds to
    import torch and spawn its ranks. Posted at once, the job's timed epoch began about 5 s before
    the plain loop's, and the service came out about 2% short (1 rank, bf16, accumulation 1: 0.982,
    95% interval 0.977-0.988, 6 pairs, a probe by hand). The same job posted after the plain loop's
    first step (its timed epoch 1-2 s after the plain loop's) gave 1.001 (0.991-1.009), and posted
    6 s later still (7 s after) 1.002 (0.994-1.008); a cold launcher, posted at once, 1.002
    (1.000-1.006). Interleaved in one run (BENCHMARKS.md §1d): 0.997 posted at once, 1.008 after
    the first step, lower in each of 6 pairs. The shortfall followed the moment of posting, not the
    service: where the two sides' epochs lie against each other changes what one side's turns find
    on the machine. Why the service lost only when it ran ahead is not established.
    `post_at_once`: as before, for that comparison (BENCHMARKS.md §1d). `offset_s`: how long after
    the plain loop's timed epoch the job's began. `first_turn`: "service" or "plain"."""
    service_roots = [stack.api.pid, *(worker.pid for worker in stack.workers.values())]
    plain, result_file = plain_process(spec, scratch, "plain", threads, stdout=subprocess.PIPE)
    plain_stepped = first_step_done(plain)
    try:
        with Turns({"service": lambda: service_roots, "plain": lambda: [plain.pid]}, first=first_turn) as turns:
            while not (post_at_once or plain_stepped.wait(1.0)):
                if plain.poll() is not None:
                    raise RuntimeError(f"the plain loop exited with {plain.returncode} before its first step")
            job_id = client.post("/v1/jobs", json=spec).json()["id"]
            job = wait_for_job(client, job_id)
            wait_for_plain(plain)
    finally:
        if plain.poll() is None:
            plain.kill()
    if job["state"] != "succeeded":
        raise RuntimeError(f"benchmark job failed: {job['error']}")
    service, plain_ = service_epochs(client, job_id), plain_epochs(result_file)
    return compared(rates(turns, "service", service), rates(turns, "plain", plain_)) | {
        "offset_s": timed_offset(service, plain_)
    }


def timed_offset(a_epochs: list[tuple[float, float, float]], b_epochs: list[tuple[float, float, float]]) -> float:
    """Seconds from the start of b's first timed epoch to a's (the epochs after the first)."""
    return round(a_epochs[1][0] - b_epochs[1][0], 2)


def plain_and_plain(spec: dict, scratch: str, threads: int, first_turn: str = "first") -> dict:
    """Two plain processes, "first" started just before "second"; `first_turn`: which one takes
    the first turn."""
    first, first_file = plain_process(spec, scratch, "first", threads)
    second, second_file = plain_process(spec, scratch, "second", threads)
    turns = processes_taking_turns(
        {"first": (first, [first.pid]), "second": (second, [second.pid])}, first_turn=first_turn
    )
    return compared(rates(turns, "first", plain_epochs(first_file)), rates(turns, "second", plain_epochs(second_file)))


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


def compared(a_rates: list[float], b_rates: list[float]) -> dict:
    """One pair's rounds (epochs after the first, paired by number) and its ratio (their
    geometric mean)."""
    rounds = list(zip(a_rates[1:], b_rates[1:], strict=False))
    ratios = [a / b for a, b in rounds]
    return {
        "a_samples_per_s": statistics.median(a for a, _ in rounds),
        "b_samples_per_s": statistics.median(b for _, b in rounds),
        "ratio": statistics.geometric_mean(ratios),
        "round_ratios": [round(ratio, 3) for ratio in ratios],
    }


def pooled(ratios: list[float], resamples: int = 10_000) -> dict:
    """Geometric mean of pair ratios, with a 95% bootstrap interval (pairs resampled)."""
    rng = random.Random(0)
    means = sorted(statistics.geometric_mean(rng.choices(ratios, k=len(ratios))) for _ in range(resamples))
    return {
        "pairs": len(ratios),
        "geometric_mean": round(statistics.geometric_mean(ratios), 4),
        "interval_95": [round(means[int(0.025 * resamples)], 4), round(means[int(0.975 * resamples)], 4)],
        "spread_of_pairs": round(statistics.stdev(math.log(r) for r in ratios), 4) if len(ratios) > 1 else None,
    }


def run(configurations=CONFIGURATIONS, controls=CONTROLS, pairs: int = PAIRS) -> dict:
    """`pairs` pairs of each configuration and control, in `pairs` passes over all of them (a
    configuration's pairs lie minutes apart, as the overhead benchmark's rounds do). Which side
    takes the first turn alternates from pass to pass: the numerator's side in odd passes, the
    plain loop (the control's "second") in even ones, so that neither is favoured by going first."""
    plan = [("service / plain", config) for config in configurations] + [
        ("plain / plain", config) for config in controls
    ]
    found: dict[tuple, list[dict]] = {step: [] for step in plan}
    with tempfile.TemporaryDirectory() as scratch, sql_database("sqlite", Path(scratch)) as url:
        stack, threads = default_stack(scratch, url)
        try:
            client = stack.client(stack.token("bench"))
            clips = {
                (ranks, precision): calibrated_clips(ranks, precision, threads) for _, (ranks, precision, _) in plan
            }
            for number in range(1, pairs + 1):
                for pair, (ranks, precision, accumulation) in plan:
                    spec = wavenet_spec(ranks, precision, accumulation, EPOCHS, clips[ranks, precision])
                    wait_until_quiet()
                    numerator_first = number % 2 == 1
                    if pair == "service / plain":
                        first_turn = "service" if numerator_first else "plain"
                        figures = service_and_plain(stack, client, spec, scratch, threads, first_turn=first_turn)
                    else:
                        first_turn = "first" if numerator_first else "second"
                        figures = plain_and_plain(spec, scratch, threads, first_turn=first_turn)
                    print(
                        f"taking turns  pair {number}/{pairs}  {pair}  {ranks} rank {precision} accumulation "
                        f"{accumulation}: {figures['a_samples_per_s']:.2f} and {figures['b_samples_per_s']:.2f} "
                        f"samples/s, ratio {figures['ratio']:.3f} (rounds {figures['round_ratios']})"
                        + (f", timed epochs {figures['offset_s']:+.1f} s apart" if "offset_s" in figures else ""),
                        flush=True,
                    )
                    found[pair, (ranks, precision, accumulation)].append(figures)
        finally:
            stack.stop()
    rows = []
    for (pair, (ranks, precision, accumulation)), runs in found.items():
        rows.append(
            {"pair": pair, "ranks": ranks, "precision": precision, "accumulation": accumulation,
             "clips": clips[ranks, precision],
             "a_samples_per_s": round(statistics.median(run["a_samples_per_s"] for run in runs), 2),
             "b_samples_per_s": round(statistics.median(run["b_samples_per_s"] for run in runs), 2),
             "ratio": round(statistics.median(run["ratio"] for run in runs), 3),
             "pair_ratios": [round(run["ratio"], 3) for run in runs],
             "offset_s": statistics.median(run["offset_s"] for run in runs) if "offset_s" in runs[0] else None,
             "round_ratios": [run["round_ratios"] for run in runs]}
        )  # fmt: skip
    summary = {
        name: pooled([ratio for row in rows if row["pair"] == pair for ratio in row["pair_ratios"]])
        for name, pair in (("service", "service / plain"), ("control", "plain / plain"))
        if any(row["pair"] == pair for row in rows)
    }
    for name, figures in summary.items():
        print(f"taking turns  {name}: {figures}", flush=True)
    return {
        "taking_turns": {
            "rows": rows, "pooled": summary, "epochs": EPOCHS, "turn_seconds": TURN_SECONDS,
            "first_turn_alternates": True,
        }
    }  # fmt: skip
