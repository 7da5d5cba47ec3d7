"""Trainer overhead and scaling: samples/s of a wavenet job through the whole service (API,
worker, launcher, DDP ranks, the trainer) against a plain hand-written DDP loop
(bench/plain_ddp.py) on the same model, data and ranks.

Epochs last 10 s or more (wavenet 32/64 channels, depth 6 x 2, 1,126 clips of 1024 samples, batch
8, SGD: about 11 s an epoch on 2 cpu ranks of one thread each here; the issue measured 563 clips at about
11 s, with a thread count this benchmark does not reproduce): short epochs time start-up and noise more than
training. Each configuration runs in `repeats` rounds, each round the service's job then the
plain loop on the same spec (its own optimizer); a run's figure is the median of its epochs after
the first (warm-up), a round's ratio is service / plain, and the configuration's ratio is the
median of its rounds' ratios. Scaling is samples/s at 2 ranks over 1 rank, for each loop. The
worker has one cpu slot per core, so each rank runs one thread, and the plain loop is given the
same.
"""

from __future__ import annotations

import os
import statistics
import tempfile
from itertools import product
from pathlib import Path

from bench.plain_ddp import run_plain_ddp
from tests.harness import REDIS_URL, Stack, sql_database, wait_for_terminal
from trainjobs.contract.spec import JobSpec
from trainjobs.worker.devices import core_share


def wavenet_spec(ranks: int, precision: str, accumulation: int, epochs: int) -> dict:
    return {
        "model": {"name": "wavenet", "params": {"n_residue": 32, "n_skip": 64, "dilation_depth": 6, "n_repeat": 2}},
        "data": {
            "name": "synthetic-audio",
            "params": {"num_samples": 1126, "length": 1024, "mu": 64, "val_fraction": 1 / 11},
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


def steady(rates: list[float]) -> float:
    return statistics.median(rates[1:] if len(rates) > 1 else rates)


def service_rates(client, spec: dict) -> list[float]:
    job_id = client.post("/v1/jobs", json=spec).json()["id"]
    job = wait_for_terminal(client, job_id, timeout=600)
    if job["state"] != "succeeded":
        raise RuntimeError(f"benchmark job failed: {job['error']}")
    return [row["samples_per_second"] for row in client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]]


CONFIGURATIONS = list(product((1, 2), ("fp32", "bf16"), (1, 4)))


def run(epochs: int = 3, repeats: int = 3, configurations=CONFIGURATIONS) -> dict:
    rows = []
    with tempfile.TemporaryDirectory() as scratch, sql_database("sqlite", Path(scratch)) as url:
        slots = max(2, os.cpu_count() or 1)
        threads = core_share(slots)  # what the worker gives each rank
        stack = Stack(Path(scratch) / "stack", url, REDIS_URL, cpu_slots=slots).start()
        try:
            client = stack.client(stack.token("bench"))
            for ranks, precision, accumulation in configurations:
                spec = wavenet_spec(ranks, precision, accumulation, epochs)
                ours, plain = [], []
                for repeat in range(repeats):
                    ours.append(steady(service_rates(client, spec)))
                    plain.append(
                        steady(run_plain_ddp(JobSpec.model_validate(spec), f"{scratch}/plain{repeat}.json", threads))
                    )
                round_ratios = [service / plain for service, plain in zip(ours, plain, strict=True)]
                row = {
                    "ranks": ranks,
                    "precision": precision,
                    "accumulation": accumulation,
                    "service_samples_per_s": round(statistics.median(ours), 1),
                    "plain_samples_per_s": round(statistics.median(plain), 1),
                    "ratio": round(statistics.median(round_ratios), 3),
                    "round_ratios": [round(ratio, 3) for ratio in round_ratios],
                }
                print(
                    f"overhead  {ranks} rank(s) {precision} accumulation {accumulation}: service "
                    f"{row['service_samples_per_s']} samples/s, plain DDP {row['plain_samples_per_s']}, "
                    f"ratio {row['ratio']}",
                    flush=True,
                )
                rows.append(row)
        finally:
            stack.stop()
    scaling = []
    for precision, accumulation in product(("fp32", "bf16"), (1, 4)):
        one = next(
            (r for r in rows if (r["ranks"], r["precision"], r["accumulation"]) == (1, precision, accumulation)), None
        )
        two = next(
            (r for r in rows if (r["ranks"], r["precision"], r["accumulation"]) == (2, precision, accumulation)), None
        )
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
    return {"overhead": rows, "scaling": scaling}
