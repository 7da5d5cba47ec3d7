"""The benchmarks' workload: a wavenet job whose epochs last about `EPOCH_SECONDS` on this
machine, the configurations it is measured in, and the stack it runs on (the settings' defaults).

Epochs last about `EPOCH_SECONDS` (wavenet 32/64 channels, depth 6 x 2, clips of 1024 samples,
batch 8, SGD): short epochs time start-up and noise more than training. How many clips that
takes depends on the machine and the precision (bf16 on a CPU without bf16 instructions is
several times slower than fp32), so each configuration's data set is sized first, from a few
timed steps in this process (`calibrated_clips`)."""

from __future__ import annotations

import math
import os
import statistics
import time
from contextlib import nullcontext
from itertools import product
from pathlib import Path

import torch
import torch.nn.functional as F

from devstack import REDIS_URL, Stack
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
    per_rank = epoch_seconds() / seconds_per_sample
    batches_per_rank = max(4, math.ceil(per_rank / spec.batch_size))
    return math.ceil(batches_per_rank * spec.batch_size * ranks / (1 - VAL_FRACTION))


def epoch_seconds() -> float:
    """EPOCH_SECONDS, or BENCH_EPOCH_SECONDS: the smoke lane's shorter epochs (tests/bench/, which
    checks that each benchmark runs and yields its figures, not what they are)."""
    return float(os.environ.get("BENCH_EPOCH_SECONDS", EPOCH_SECONDS))


def steady(rates: list[float]) -> float:
    return statistics.median(rates[1:] if len(rates) > 1 else rates)


CONFIGURATIONS = list(product((1, 2), ("fp32", "bf16"), (1, 4)))


def default_stack(scratch: str, database_url: str, name: str = "stack", **env: str) -> tuple[Stack, int]:
    """The API and a worker with a cpu slot per core, on the settings' defaults (the tests' stack
    sweeps ten times as often and runs one API process) and `env`, started; and the threads the
    worker gives each rank of a job."""
    slots = max(2, os.cpu_count() or 1)
    defaults = Settings.model_fields
    stack = Stack(
        Path(scratch) / name,
        database_url,
        REDIS_URL,
        cpu_slots=slots,
        TRAINJOBS_SWEEP_INTERVAL_SECONDS=str(defaults["sweep_interval_seconds"].default),
        TRAINJOBS_OUTBOX_GRACE_SECONDS=str(defaults["outbox_grace_seconds"].default),
        TRAINJOBS_API_WORKERS=str(defaults["api_workers"].get_default(call_default_factory=True)),
        **env,
    ).start()
    return stack, core_share(slots)
