"""Preemption: from a higher-priority job's POST to the end of its first optimizer step, when a
running job of lower priority holds the devices, through the real API and worker (warm launchers
on, the default), against what the victim must do first: finish the optimizer step it is in and
write its checkpoint. `repeats` rounds; each round a fresh victim, preempted once it has trained a
few steps, and a fresh preemptor.

The victim is the benchmarks' wavenet (2 cpu ranks, fp32, accumulation 1, about 0.1 s a step
here); the preemptor the tests' tiny wavenet. Its first step is read from its rank 0's log (as
bench/dispatch.py does), the victim's checkpoint write from its own (rank 0 says how long it took),
its step time from its progress reports."""

from __future__ import annotations

import re
import statistics
import tempfile
import time
from pathlib import Path

from bench.dispatch import first_step_mark
from bench.support.workload import wavenet_spec
from devstack import REDIS_URL, Stack, sql_database, tiny_wavenet_spec, wait_until

VICTIM = {**wavenet_spec(2, "fp32", 1, epochs=50, clips=2048), "priority": 10}
PREEMPTOR = tiny_wavenet_spec(epochs=1, priority=90)
CHECKPOINTED = re.compile(r"preempted: checkpointed step (\d+) of epoch \d+ in ([0-9.]+) s")


def one_round(stack: Stack, alice, admin) -> dict:
    victim = alice.post("/v1/jobs", json=VICTIM).json()["id"]
    progress = wait_until(lambda: _progress(alice, victim), 180, interval=0.2, what="the victim training")
    step_seconds = VICTIM["batch_size"] * VICTIM["gpus"] / progress["samples_per_second"]
    posted = time.time()
    preemptor = admin.post("/v1/jobs", json=PREEMPTOR).json()["id"]
    done = wait_until(lambda: _ended(admin, preemptor), 180, interval=0.1, what="the preemptor to end")
    assert done["state"] == "succeeded", done
    first_step = first_step_mark(next((stack.home / "runs" / preemptor / "attempt1").rglob("rank0.log")))
    log = next((stack.home / "runs" / victim / "attempt1").rglob("rank0.log")).read_text()
    written = CHECKPOINTED.search(log)
    admin.post(f"/v1/jobs/{victim}/cancel")
    wait_until(lambda: _ended(admin, victim), 120, what="the victim to end")
    return {
        "post_to_first_step_s": first_step - posted,
        "victim_step_s": step_seconds,
        "checkpoint_write_s": float(written.group(2)) if written else None,
    }


def _progress(client, job_id: str) -> dict | None:
    job = client.get(f"/v1/jobs/{job_id}").json()
    progress = job["progress"]
    return progress if job["state"] == "running" and progress and progress["step"] >= 3 else None


def _ended(client, job_id: str) -> dict | None:
    job = client.get(f"/v1/jobs/{job_id}").json()
    return job if job["state"] in ("succeeded", "failed", "cancelled") else None


def run(repeats: int = 5) -> dict:
    rounds = []
    with tempfile.TemporaryDirectory() as scratch, sql_database("sqlite", Path(scratch)) as url:
        env = {"TRAINJOBS_PREEMPT_MIN_RUNTIME_SECONDS": "0", "TRAINJOBS_PROGRESS_SECONDS": "0.5"}
        stack = Stack(Path(scratch) / "stack", url, REDIS_URL, **env).start()
        try:
            alice, admin = stack.client(stack.token("alice")), stack.client(stack.token("root", admin=True))
            for number in range(1, repeats + 1):
                figures = one_round(stack, alice, admin)
                rounds.append(figures)
                print(f"preemption  round {number}/{repeats}: {figures}", flush=True)
        finally:
            stack.stop()
    return {"preemption": {name: _median(rounds, name) for name in rounds[0]} | {"rounds": rounds}}


def _median(rounds: list[dict], name: str) -> float | None:
    values = [round_[name] for round_ in rounds if round_[name] is not None]
    return round(statistics.median(values), 3) if values else None
