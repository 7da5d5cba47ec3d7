"""Taking turns: the service's job and the plain loop (bench/support/plain_ddp.py) alive at once, on the
same spec, taking turns on the whole machine a fraction of a second at a time; and, as the
control, two plain loops taking turns the same way.

Why: this machine's speed drifts by 5 to 15% over seconds and minutes (other tenants of the host
share its caches and memory bandwidth), so runs minutes apart (bench/overhead.py's rounds) differ
by more than the 1% to be resolved; and two loops that train at the same moment
(bench/sidebyside.py) still differ by a few %, each on its own core with its own neighbours.
Here both loops use the same cores, in turns of `TURN_SECONDS`: a drift slower than that falls on
both alike, and so does whatever one core has that the other has not. What is left is the
process itself: two processes of the same script, taking turns, still differ by a few % from one
pair to the next, and keep that difference over their whole run (where their memory landed, most
likely). So the unit here is the pair: each pair is a fresh plain process and a fresh job, and
there are `PAIRS` of them per configuration, pooled at the end over all configurations.

How: the plain loop runs as a shell would start it (`python -m bench.support.plain_ddp`, a session of
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

import statistics
import subprocess
import tempfile
from pathlib import Path

from bench.support.epochs import (
    first_step_done,
    plain_epochs,
    plain_process,
    service_epochs,
    timed_offset,
    wait_for_job,
)
from bench.support.process_cpu import wait_until_quiet
from bench.support.ratios import compared, pooled
from bench.support.turn_taking import TURN_SECONDS, Turns, processes_taking_turns, rates, wait_for_plain
from bench.support.workload import CONFIGURATIONS, calibrated_clips, default_stack, wavenet_spec
from devstack import sql_database

EPOCHS = 2  # the first warms up; the second is timed
PAIRS = 8  # per configuration: one pair's spread is 1 to 2% (the control rows), a median of 8 under half that
CONTROLS = [(1, "fp32", 4), (2, "fp32", 4)]


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


def plain_and_plain(spec: dict, scratch: str, threads: int, first_turn: str = "first") -> dict:
    """Two plain processes, "first" started just before "second"; `first_turn`: which one takes
    the first turn."""
    first, first_file = plain_process(spec, scratch, "first", threads)
    second, second_file = plain_process(spec, scratch, "second", threads)
    turns = processes_taking_turns(
        {"first": (first, [first.pid]), "second": (second, [second.pid])}, first_turn=first_turn
    )
    return compared(rates(turns, "first", plain_epochs(first_file)), rates(turns, "second", plain_epochs(second_file)))


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
                for pair, config in plan:
                    figures = _one_pair(
                        stack, client, pair, config, clips, scratch, threads, numerator_first=number % 2
                    )
                    print(f"taking turns  pair {number}/{pairs}  {_described(pair, config, figures)}", flush=True)
                    found[pair, config].append(figures)
        finally:
            stack.stop()
    rows = [pairs_row(pair, config, clips[config[:2]], runs) for (pair, config), runs in found.items()]
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


def _one_pair(stack, client, pair: str, config: tuple, clips: dict, scratch: str, threads: int, numerator_first: bool):
    ranks, precision, accumulation = config
    spec = wavenet_spec(ranks, precision, accumulation, EPOCHS, clips[ranks, precision])
    wait_until_quiet()
    if pair == "service / plain":
        first_turn = "service" if numerator_first else "plain"
        return service_and_plain(stack, client, spec, scratch, threads, first_turn=first_turn)
    return plain_and_plain(spec, scratch, threads, first_turn="first" if numerator_first else "second")


def _described(pair: str, config: tuple, figures: dict) -> str:
    ranks, precision, accumulation = config
    return (
        f"{pair}  {ranks} rank {precision} accumulation {accumulation}: {figures['a_samples_per_s']:.2f} and "
        f"{figures['b_samples_per_s']:.2f} samples/s, ratio {figures['ratio']:.3f} (rounds {figures['round_ratios']})"
        + (f", timed epochs {figures['offset_s']:+.1f} s apart" if "offset_s" in figures else "")
    )


def pairs_row(pair: str, config: tuple, clips: int, runs: list[dict]) -> dict:
    """One configuration's pairs as a report row: medians, each pair's ratio, the offsets."""
    ranks, precision, accumulation = config
    return {
        "pair": pair, "ranks": ranks, "precision": precision, "accumulation": accumulation, "clips": clips,
        "a_samples_per_s": round(statistics.median(run["a_samples_per_s"] for run in runs), 2),
        "b_samples_per_s": round(statistics.median(run["b_samples_per_s"] for run in runs), 2),
        "ratio": round(statistics.median(run["ratio"] for run in runs), 3),
        "pair_ratios": [round(run["ratio"], 3) for run in runs],
        "offset_s": statistics.median(run["offset_s"] for run in runs) if "offset_s" in runs[0] else None,
        "round_ratios": [run["round_ratios"] for run in runs],
    }  # fmt: skip
