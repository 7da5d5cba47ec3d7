"""Trainer overhead: samples/s of the trainer vs the plain DDP loop, same model, data, ranks.

Each configuration runs both loops in turn, `--repeats` times; the figure per run is the median
epoch after the first (warm-up) epoch, and the ratio is trainer / plain of the medians.
"""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from bench.plain_ddp import run_plain_ddp
from trainjobs.contract.spec import JobSpec
from worker.local_run import local_request, train_locally


def wavenet_spec(ranks: int, precision: str, accumulation: int, epochs: int) -> JobSpec:
    return JobSpec.model_validate({
        "model": {"name": "wavenet", "params": {"n_residue": 16, "n_skip": 32, "dilation_depth": 6, "n_repeat": 2}},
        "data": {"name": "synthetic-audio", "params": {"num_samples": 288, "length": 512, "mu": 64,
                                                        "val_fraction": 1 / 9}},
        "device": "cpu", "gpus": ranks, "epochs": epochs, "batch_size": 8, "precision": precision,
        "accumulation_steps": accumulation, "optimizer": {"name": "adamw", "lr": 0.002}, "lr_scaling": "none",
    })


def trainer_rates(spec: JobSpec, workdir: Path) -> list[float]:
    import json

    request = local_request(spec, workdir, workdir / "data")
    outcome = train_locally(request)
    if outcome.state != "succeeded":
        raise RuntimeError(f"trainer run failed: {outcome.error}")
    lines = (Path(request.run_dir) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["samples_per_second"] for line in lines]


def steady(rates: list[float]) -> float:
    return statistics.median(rates[1:] if len(rates) > 1 else rates)


def measure(ranks: int, precision: str, accumulation: int, epochs: int, repeats: int) -> dict:
    spec = wavenet_spec(ranks, precision, accumulation, epochs)
    ours, plain = [], []
    with tempfile.TemporaryDirectory() as scratch:
        for repeat in range(repeats):
            ours.append(steady(trainer_rates(spec, Path(scratch) / f"trainer{repeat}")))
            plain.append(steady(run_plain_ddp(spec, f"{scratch}/plain{repeat}.json")))
    trainer_median, plain_median = statistics.median(ours), statistics.median(plain)
    return {"ranks": ranks, "precision": precision, "accumulation": accumulation,
            "trainer_samples_per_s": round(trainer_median, 1), "plain_samples_per_s": round(plain_median, 1),
            "ratio": round(trainer_median / plain_median, 3)}


CONFIGURATIONS = [(1, "fp32", 1), (2, "fp32", 1), (2, "bf16", 1), (2, "fp32", 4), (1, "bf16", 4)]


def run(epochs: int = 4, repeats: int = 3, configurations=CONFIGURATIONS) -> list[dict]:
    rows = []
    for ranks, precision, accumulation in configurations:
        row = measure(ranks, precision, accumulation, epochs, repeats)
        print(f"overhead  ranks={ranks} {precision} accumulation={accumulation}: trainer "
              f"{row['trainer_samples_per_s']} samples/s, plain DDP {row['plain_samples_per_s']} samples/s, "
              f"ratio {row['ratio']}", flush=True)
        rows.append(row)
    return rows
