"""The sandbox's cost on throughput: the same job through two stacks alive at once, one whose
worker runs every job's ranks in the sandbox (bubblewrap; the default where it is installed) and
one whose worker runs none (`TRAINJOBS_SANDBOX=off`), taking turns on the whole machine a fraction
of a second at a time, as section 1c's pairs do (bench/turns.py says why turns, and how a rate is
taken over a side's own turns). Each side is all of its stack: API, worker, launcher, ranks.
`PAIRS` pairs per configuration, the side that goes first alternating; a pair's ratio is
sandboxed / unsandboxed over the epochs after the first."""

from __future__ import annotations

import statistics
import tempfile
from pathlib import Path

from bench.support.epochs import service_epochs, wait_for_job
from bench.support.process_cpu import wait_until_quiet
from bench.support.ratios import compared, pooled
from bench.support.turn_taking import Turns, rates
from bench.support.workload import calibrated_clips, default_stack, wavenet_spec
from devstack import sql_database

EPOCHS = 2  # the first warms up; the second is timed
PAIRS = 4
CONFIGURATIONS = [(2, "fp32", 1), (1, "fp32", 4)]
SIDES = {"sandboxed": "auto", "unsandboxed": "off"}  # TRAINJOBS_SANDBOX of each side's worker


def one_pair(stacks: dict, clients: dict, spec: dict, first_turn: str) -> dict:
    roots = {side: [stack.api.pid, *(w.pid for w in stack.workers.values())] for side, stack in stacks.items()}
    with Turns({side: (lambda side=side: roots[side]) for side in stacks}, first=first_turn) as turns:
        jobs = {side: clients[side].post("/v1/jobs", json=spec).json()["id"] for side in stacks}
        ended = {side: wait_for_job(clients[side], job_id) for side, job_id in jobs.items()}
    for side, job in ended.items():
        if job["state"] != "succeeded":
            raise RuntimeError(f"the {side} job failed: {job['error']}")
    epochs = {side: service_epochs(clients[side], job_id) for side, job_id in jobs.items()}
    return compared(rates(turns, "sandboxed", epochs["sandboxed"]), rates(turns, "unsandboxed", epochs["unsandboxed"]))


def run(configurations=CONFIGURATIONS, pairs: int = PAIRS) -> dict:
    with tempfile.TemporaryDirectory() as scratch:
        for side in SIDES:
            (Path(scratch) / side).mkdir()
        with (
            sql_database("sqlite", Path(scratch) / "sandboxed") as url_a,
            sql_database("sqlite", Path(scratch) / "unsandboxed") as url_b,
        ):
            found, clips = _measured(scratch, url_a, url_b, configurations, pairs)
    rows = [_row(config, clips[config], runs) for config, runs in found.items()]
    ratios = [ratio for row in rows for ratio in row["pair_ratios"]]
    return {"sandbox_cost": {"rows": rows, "pooled": pooled(ratios), "epochs": EPOCHS}}


def _measured(scratch: str, url_a: str, url_b: str, configurations, pairs: int) -> tuple[dict, dict]:
    stacks: dict = {}
    try:
        for (side, mode), url in zip(SIDES.items(), (url_a, url_b), strict=True):
            stacks[side], threads = default_stack(scratch, url, name=f"{side}/stack", TRAINJOBS_SANDBOX=mode)
        clips = {config: calibrated_clips(config[0], config[1], threads) for config in configurations}
        return _pairs(stacks, clips, pairs), clips
    finally:
        for stack in stacks.values():
            stack.stop()


def _pairs(stacks: dict, clips: dict, pairs: int) -> dict[tuple, list[dict]]:
    """`pairs` passes over the configurations; the side that goes first alternates by pass."""
    clients = {side: stack.client(stack.token("bench")) for side, stack in stacks.items()}
    found: dict[tuple, list[dict]] = {config: [] for config in clips}
    for number in range(1, pairs + 1):
        for config in clips:
            wait_until_quiet()
            figures = one_pair(stacks, clients, wavenet_spec(*config, EPOCHS, clips[config]), FIRST[number % 2])
            found[config].append(figures)
            print(f"sandbox cost  pair {number}/{pairs}  {config}: ratio {figures['ratio']:.3f}", flush=True)
    return found


FIRST = ("unsandboxed", "sandboxed")  # by pass number, odd passes: the sandboxed side first


def _row(config: tuple, clips: int, runs: list[dict]) -> dict:
    ranks, precision, accumulation = config
    return {
        "ranks": ranks, "precision": precision, "accumulation": accumulation, "clips": clips,
        "sandboxed_samples_per_s": round(statistics.median(run["a_samples_per_s"] for run in runs), 2),
        "unsandboxed_samples_per_s": round(statistics.median(run["b_samples_per_s"] for run in runs), 2),
        "pair_ratios": [round(run["ratio"], 3) for run in runs],
    }  # fmt: skip
