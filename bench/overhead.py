"""Trainer overhead and scaling: samples/s of a wavenet job through the whole service (API,
worker, launcher, DDP ranks, the trainer) against a plain hand-written DDP loop
(bench/support/plain_ddp.py) on the same model, data, ranks and optimizer.

The workload, its epochs of about 12 s and the stack it runs on are bench/support/workload.py's.

Each configuration runs in `repeats` rounds: the service's job and the plain loop on the same
spec, in alternating order (service first in even rounds, plain first in odd ones), so that a
drift of the machine's speed does not favour either. A run's figure is the median of its epochs
after the first (warm-up); a round's ratio is service / plain, and the configuration's ratio is
the median of its rounds' ratios. Scaling is samples/s at 2 ranks over 1 rank, for each loop.
The worker has one cpu slot per core, so each rank runs one thread, and the plain loop is given
the same.

Each run starts once the machine is quiet (after a job, the worker warms its next launcher, a
few seconds of imports). While each run trains, every process's CPU time is sampled from /proc
(bench/support/process_cpu.py): where the cores went (ranks, launcher, worker, API, Redis, SQL,
the rest) and how long the ranks waited for a core. The service's stack runs with the settings'
defaults (the tests' stack sweeps ten times as often).
"""

from __future__ import annotations

import statistics
import tempfile
from itertools import product
from pathlib import Path

from bench.support.plain_ddp import run_plain_ddp
from bench.support.process_cpu import ProcessCpu, wait_until_quiet
from bench.support.workload import CONFIGURATIONS, VAL_FRACTION, calibrated_clips, default_stack, steady, wavenet_spec
from devstack import sql_database, wait_for_terminal
from trainjobs.contract.spec import JobSpec


def service_run(client, spec: dict) -> tuple[list[float], dict[str, float]]:
    with ProcessCpu() as cpu:
        job_id = client.post("/v1/jobs", json=spec).json()["id"]
        job = wait_for_terminal(client, job_id, timeout=1800)
    if job["state"] != "succeeded":
        raise RuntimeError(f"benchmark job failed: {job['error']}")
    rates = [row["samples_per_second"] for row in client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]]
    return rates, cpu.summary()


def plain_run(spec: dict, result_path: str, threads: int) -> tuple[list[float], dict[str, float]]:
    with ProcessCpu() as cpu:
        rates = run_plain_ddp(JobSpec.model_validate(spec), result_path, threads)
    return rates, cpu.summary()


def median_figures(runs: list[dict[str, float]]) -> dict[str, float]:
    return {key: round(statistics.median(run[key] for run in runs), 3) for key in runs[0]}


def run(epochs: int = 3, repeats: int = 3, configurations=CONFIGURATIONS) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as scratch, sql_database("sqlite", Path(scratch)) as url:
        stack, threads = default_stack(scratch, url)
        try:
            client = stack.client(stack.token("bench"))
            for config in configurations:
                row = _configuration(client, config, epochs, repeats, threads, scratch)
                print(
                    f"overhead  {row['ranks']} rank(s) {row['precision']} accumulation {row['accumulation']} "
                    f"({row['clips']} clips): service {row['service_samples_per_s']} samples/s, plain DDP "
                    f"{row['plain_samples_per_s']}, ratio {row['ratio']} (rounds {row['round_ratios']})",
                    flush=True,
                )
                print(f"          cpu while training: service {row['service_cpu']}", flush=True)
                print(f"                              plain   {row['plain_cpu']}", flush=True)
                rows.append(row)
        finally:
            stack.stop()
    return {"overhead": rows, "scaling": scaling_of(rows)}


def _configuration(client, config: tuple, epochs: int, repeats: int, threads: int, scratch: str) -> dict:
    """`repeats` rounds of the service's job and the plain loop on one configuration, in
    alternating order (service first in even rounds)."""
    ranks, precision, accumulation = config
    clips = calibrated_clips(ranks, precision, threads)
    spec = wavenet_spec(ranks, precision, accumulation, epochs, clips)
    ours, plain, our_cpu, plain_cpu = [], [], [], []
    for repeat in range(repeats):
        for which in ("service", "plain") if repeat % 2 == 0 else ("plain", "service"):
            # Each run starts on a quiet machine: after a job the worker warms its next launcher
            # (seconds of imports), which would otherwise fall in the next run.
            wait_until_quiet()
            if which == "service":
                rates, cpu = service_run(client, spec)
                ours.append(steady(rates))
                our_cpu.append(cpu)
            else:
                rates, cpu = plain_run(spec, f"{scratch}/plain{repeat}.json", threads)
                plain.append(steady(rates))
                plain_cpu.append(cpu)
    round_ratios = [service / plain for service, plain in zip(ours, plain, strict=True)]
    return {
        "ranks": ranks, "precision": precision, "accumulation": accumulation, "clips": clips,
        "epoch_seconds": round((clips * (1 - VAL_FRACTION)) / statistics.median(plain), 1),
        "service_samples_per_s": round(statistics.median(ours), 1),
        "plain_samples_per_s": round(statistics.median(plain), 1),
        "ratio": round(statistics.median(round_ratios), 3),
        "round_ratios": [round(ratio, 3) for ratio in round_ratios],
        "service_runs": [round(rate, 1) for rate in ours],
        "plain_runs": [round(rate, 1) for rate in plain],
        "service_cpu": median_figures(our_cpu),
        "plain_cpu": median_figures(plain_cpu),
    }  # fmt: skip


def scaling_of(rows: list[dict]) -> list[dict]:
    scaling = []
    for precision, accumulation in product(("fp32", "bf16"), (1, 4)):
        found = {(r["ranks"], r["precision"], r["accumulation"]): r for r in rows}
        one, two = found.get((1, precision, accumulation)), found.get((2, precision, accumulation))
        if one and two:
            entry = {
                "precision": precision,
                "accumulation": accumulation,
                "service_2_over_1": round(two["service_samples_per_s"] / one["service_samples_per_s"], 3),
                "plain_2_over_1": round(two["plain_samples_per_s"] / one["plain_samples_per_s"], 3),
            }
            print(
                f"scaling   {precision} accumulation {accumulation}: 2 ranks / 1 rank = service "
                f"{entry['service_2_over_1']}, plain DDP {entry['plain_2_over_1']}",
                flush=True,
            )
            scaling.append(entry)
    return scaling
