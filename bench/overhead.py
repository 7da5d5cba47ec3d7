"""Trainer overhead and scaling: samples/s of a wavenet job through the whole service (API,
worker, launcher, DDP ranks, the trainer) against a plain hand-written DDP loop
(bench/plain_ddp.py) on the same model, data, ranks and optimizer.

Epochs last about `EPOCH_SECONDS` (wavenet 32/64 channels, depth 6 x 2, clips of 1024 samples,
batch 8, SGD): short epochs time start-up and noise more than training. How many clips that
takes depends on the machine and the precision (bf16 on a CPU without bf16 instructions is
several times slower than fp32), so each configuration's data set is sized first, from a few
timed steps in this process (`calibrated_clips`).

Each configuration runs in `repeats` rounds: the service's job and the plain loop on the same
spec, in alternating order (service first in even rounds, plain first in odd ones), so that a
drift of the machine's speed does not favour either. A run's figure is the median of its epochs
after the first (warm-up); a round's ratio is service / plain, and the configuration's ratio is
the median of its rounds' ratios. Scaling is samples/s at 2 ranks over 1 rank, for each loop.
The worker has one cpu slot per core, so each rank runs one thread, and the plain loop is given
the same.

Each run starts once the machine is quiet (after a job, the worker warms its next launcher, a
few seconds of imports). While each run trains, every process's CPU time is sampled from /proc (bench/process_cpu.py):
where the cores went (ranks, launcher, worker, API, Redis, SQL, the rest) and how long the ranks
waited for a core. The service's stack runs with the settings' defaults (the tests' stack sweeps
ten times as often).
"""

from __future__ import annotations

import math
import os
import statistics
import tempfile
import time
from contextlib import nullcontext
from itertools import product
from pathlib import Path

import torch
import torch.nn.functional as F

from bench.plain_ddp import run_plain_ddp
from bench.process_cpu import ProcessCpu, wait_until_quiet
from devstack import REDIS_URL, Stack, sql_database, wait_for_terminal
from trainjobs.contract.spec import JobSpec
from trainjobs.settings import Settings
from trainjobs.worker.devices import core_share
from trainjobs.worker.trainer.catalog import build_datasets, build_model

EPOCH_SECONDS = 12.0
VAL_FRACTION = 1 / 11
CLIP_LENGTH = 1024


def wavenet_spec(ranks: int, precision: str, accumulation: int, epochs: int, clips: int = 1126) -> dict:
    return {
        "model": {"name": "wavenet", "params": {"n_residue": 32, "n_skip": 64, "dilation_depth": 6, "n_repeat": 2}},
        "data": {
            "name": "synthetic-audio",
            "params": {"num_samples": clips, "length": CLIP_LENGTH, "mu": 64, "val_fraction": VAL_FRACTION},
        },
        "device": "cpu",
        "gpus": ranks,
        "epochs": epochs,
        "batch_size": 8,
        "precision": precision,
        "accumulation_steps": accumulation,
        "optimizer": {"name": "sgd", "lr": 0.01},
        "lr_scaling": "none",
    }


def calibrated_clips(ranks: int, precision: str, threads: int, steps: int = 4) -> int:
    """Clips for epochs of about EPOCH_SECONDS: one rank's seconds per sample, timed here over a
    few steps on `threads` threads, times the samples each rank trains on."""
    spec = JobSpec.model_validate(wavenet_spec(ranks, precision, 1, 1, clips=64))
    previous_threads = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        torch.manual_seed(0)
        full, train, _ = build_datasets(spec.data.name, spec.data.params, "/nonexistent")
        model = build_model(spec.model.name, spec.model.params, full)
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if precision == "bf16" else nullcontext
        inputs, targets = map(torch.stack, zip(*(train[i] for i in range(spec.batch_size)), strict=True))
        timed = 0.0
        for step in range(steps + 1):  # the first step warms up
            started = time.perf_counter()
            with autocast():
                loss = F.cross_entropy(model(inputs), targets)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            timed += time.perf_counter() - started if step else 0.0
    finally:
        torch.set_num_threads(previous_threads)
    seconds_per_sample = timed / (steps * spec.batch_size)
    per_rank = EPOCH_SECONDS / seconds_per_sample
    batches_per_rank = max(4, math.ceil(per_rank / spec.batch_size))
    return math.ceil(batches_per_rank * spec.batch_size * ranks / (1 - VAL_FRACTION))


def steady(rates: list[float]) -> float:
    return statistics.median(rates[1:] if len(rates) > 1 else rates)


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


CONFIGURATIONS = list(product((1, 2), ("fp32", "bf16"), (1, 4)))


def default_stack(scratch: str, database_url: str) -> tuple[Stack, int]:
    """The API and a worker with a cpu slot per core, on the settings' defaults (the tests' stack
    sweeps ten times as often and runs one API process), started; and the threads the worker
    gives each rank of a job."""
    slots = max(2, os.cpu_count() or 1)
    defaults = Settings.model_fields
    stack = Stack(
        Path(scratch) / "stack",
        database_url,
        REDIS_URL,
        cpu_slots=slots,
        TRAINJOBS_SWEEP_INTERVAL_SECONDS=str(defaults["sweep_interval_seconds"].default),
        TRAINJOBS_OUTBOX_GRACE_SECONDS=str(defaults["outbox_grace_seconds"].default),
        TRAINJOBS_API_WORKERS=str(defaults["api_workers"].get_default(call_default_factory=True)),
    ).start()
    return stack, core_share(slots)


def run(epochs: int = 3, repeats: int = 3, configurations=CONFIGURATIONS) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as scratch, sql_database("sqlite", Path(scratch)) as url:
        stack, threads = default_stack(scratch, url)
        try:
            client = stack.client(stack.token("bench"))
            for ranks, precision, accumulation in configurations:
                clips = calibrated_clips(ranks, precision, threads)
                spec = wavenet_spec(ranks, precision, accumulation, epochs, clips)
                ours, plain, our_cpu, plain_cpu = [], [], [], []
                for repeat in range(repeats):
                    order = ("service", "plain") if repeat % 2 == 0 else ("plain", "service")
                    for which in order:
                        # Each run starts on a quiet machine: after a job the worker warms its next
                        # launcher (seconds of imports), which would otherwise fall in the next run.
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
                row = {
                    "ranks": ranks,
                    "precision": precision,
                    "accumulation": accumulation,
                    "clips": clips,
                    "epoch_seconds": round((clips * (1 - VAL_FRACTION)) / statistics.median(plain), 1),
                    "service_samples_per_s": round(statistics.median(ours), 1),
                    "plain_samples_per_s": round(statistics.median(plain), 1),
                    "ratio": round(statistics.median(round_ratios), 3),
                    "round_ratios": [round(ratio, 3) for ratio in round_ratios],
                    "service_runs": [round(rate, 1) for rate in ours],
                    "plain_runs": [round(rate, 1) for rate in plain],
                    "service_cpu": median_figures(our_cpu),
                    "plain_cpu": median_figures(plain_cpu),
                }
                print(
                    f"overhead  {ranks} rank(s) {precision} accumulation {accumulation} ({clips} clips): service "
                    f"{row['service_samples_per_s']} samples/s, plain DDP {row['plain_samples_per_s']}, "
                    f"ratio {row['ratio']} (rounds {row['round_ratios']})",
                    flush=True,
                )
                print(f"          cpu while training: service {row['service_cpu']}", flush=True)
                print(f"                              plain   {row['plain_cpu']}", flush=True)
                rows.append(row)
        finally:
            stack.stop()
    return {"overhead": rows, "scaling": scaling_of(rows)}


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
