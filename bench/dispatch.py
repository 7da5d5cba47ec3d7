"""Dispatch latency: from POST to `running` and to the first epoch's metrics, through the real
API and worker, against launching the same trainer directly from the shell (`trainjobs train`)
and timing its first epoch line. The difference is what the service adds."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.harness import REDIS_URL, Stack, sql_database, tiny_wavenet_spec, wait_until

SPEC = tiny_wavenet_spec(epochs=1)


def through_service(stack: Stack, token: str) -> tuple[float, float]:
    """Seconds from POST to the `running` event and to the first `metrics` event (SSE), with the
    worker idle when the POST goes out (the previous job's devices released)."""
    client = stack.client(token)
    wait_until(
        lambda: all(worker["busy"] == 0 for worker in client.get("/v1/workers").json()["items"]),
        60,
        interval=0.1,
        what="an idle worker",
    )
    time.sleep(1.5)  # and its heartbeat settled
    start = time.perf_counter()
    job_id = client.post("/v1/jobs", json=SPEC).json()["id"]
    running = first_metrics = None
    with client.stream("GET", f"/v1/jobs/{job_id}/events", timeout=120) as response:
        kind = None
        for line in response.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                if kind == "state" and running is None and json.loads(line[6:])["state"] == "running":
                    running = time.perf_counter() - start
                if kind == "metrics" and first_metrics is None:
                    first_metrics = time.perf_counter() - start
    return running, first_metrics


def from_the_shell(workdir: Path) -> float:
    """Seconds from starting `trainjobs train` to its first epoch's line."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_file = workdir / "spec.json"
    spec_file.write_text(json.dumps(SPEC))
    start = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "trainjobs.cli", "train", str(spec_file), "--workdir", str(workdir)],
        stdout=subprocess.PIPE,
        text=True,
    )
    elapsed = None
    for line in process.stdout:
        if line.startswith("epoch 1:") and elapsed is None:
            elapsed = time.perf_counter() - start
    process.wait()
    return elapsed


def run(repeats: int = 5) -> dict:
    with tempfile.TemporaryDirectory() as scratch, sql_database("sqlite", Path(scratch)) as url:
        stack = Stack(Path(scratch) / "stack", url, REDIS_URL, TRAINJOBS_HEARTBEAT_SECONDS="0.5").start()
        try:
            token = stack.token("bench")
            through_service(stack, token)  # warm-up: worker connections, page cache
            service = [through_service(stack, token) for _ in range(repeats)]
        finally:
            stack.stop()
        shell = [from_the_shell(Path(scratch) / f"shell{index}") for index in range(repeats)]
    result = {
        "post_to_running_s": round(statistics.median(run for run, _ in service), 3),
        "post_to_first_metrics_s": round(statistics.median(metrics for _, metrics in service), 3),
        "shell_to_first_metrics_s": round(statistics.median(shell), 3),
    }
    result["service_adds_s"] = round(result["post_to_first_metrics_s"] - result["shell_to_first_metrics_s"], 3)
    print(
        f"dispatch  POST->running {result['post_to_running_s']}s, POST->first metrics "
        f"{result['post_to_first_metrics_s']}s, shell->first metrics {result['shell_to_first_metrics_s']}s: "
        f"the service adds {result['service_adds_s']}s (median of {repeats})",
        flush=True,
    )
    return result
