"""Start-up: from POST to the end of the job's first optimizer step, through the real API and
worker, with the worker idle, against a plain `torch.multiprocessing.spawn` script started from
the shell (bench/support/plain_ddp.py on the same spec) and timed to its own first step.

Through the service twice: with a launcher waiting ahead of the job (the default,
TRAINJOBS_WARM_LAUNCHERS=1) and without (0: the launcher, its fork server and the ranks start with
the job, as every job did before warm starts). Rank 0 marks its first optimizer step in its log
with the wall-clock time; each figure is that time less the time the POST (or the shell command)
went out. Median and p90 of `repeats` jobs each.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from devstack import REDIS_URL, Stack, sql_database, tiny_wavenet_spec, wait_until

ROOT = Path(__file__).resolve().parents[1]
SPEC = tiny_wavenet_spec(epochs=1)
MARK = "first optimizer step done at "


def first_step_mark(path: Path) -> float | None:
    if not path.exists():
        return None
    for line in path.read_text().splitlines():
        if line.startswith(MARK):
            return float(line.removeprefix(MARK))
    return None


def through_service(stack: Stack, token: str, spec: dict = SPEC) -> tuple[float, float]:
    """Seconds from POST to the `running` state and to the end of the first optimizer step, with
    the worker idle when the POST goes out (the previous job ended, its next launcher warmed)."""
    client = stack.client(token)
    wait_until(
        lambda: all(worker["busy"] == 0 for worker in client.get("/v1/workers").json()["items"]),
        60,
        interval=0.1,
        what="an idle worker",
    )
    time.sleep(4)  # the launcher started for the next job has loaded torch and the trainer
    posted = time.time()
    job_id = client.post("/v1/jobs", json=spec).json()["id"]
    running = None
    while running is None:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] != "queued":
            running = time.time() - posted
        time.sleep(0.01)
    job = wait_until(
        lambda: (lambda j: j if j["state"] in ("succeeded", "failed") else None)(
            client.get(f"/v1/jobs/{job_id}").json()
        ),
        120,
        what="the job to end",
    )
    assert job["state"] == "succeeded", job
    rank_log = next((stack.home / "runs" / job_id / "attempt1").rglob("rank0.log"))  # in ranks/ when sandboxed
    return running, first_step_mark(rank_log) - posted


def from_the_shell(workdir: Path) -> float:
    """Seconds from starting the plain spawn script to its first optimizer step."""
    workdir.mkdir(parents=True, exist_ok=True)
    spec_file = workdir / "spec.json"
    spec_file.write_text(json.dumps(SPEC))
    started = time.time()
    output = subprocess.run(
        [sys.executable, "-m", "bench.support.plain_ddp", str(spec_file), str(workdir / "result.json")],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    ).stdout
    mark = next(float(line.removeprefix(MARK)) for line in output.splitlines() if line.startswith(MARK))
    return mark - started


def _summary(values: list[float]) -> dict:
    ordered = sorted(values)
    return {
        "median_s": round(statistics.median(ordered), 3),
        "p90_s": round(ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))], 3),
        "runs_s": [round(value, 3) for value in values],
    }


def run(repeats: int = 10) -> dict:
    result = {}
    with tempfile.TemporaryDirectory() as scratch:
        for name, warm in (("warm", "1"), ("cold", "0")):
            (Path(scratch) / name).mkdir()
            with sql_database("sqlite", Path(scratch) / name) as url:
                stack = Stack(
                    Path(scratch) / name / "stack",
                    url,
                    REDIS_URL,
                    TRAINJOBS_HEARTBEAT_SECONDS="0.5",
                    TRAINJOBS_WARM_LAUNCHERS=warm,
                ).start()
                try:
                    token = stack.token("bench")
                    through_service(stack, token)  # warm-up: the worker's connections, the page cache
                    runs = [through_service(stack, token) for _ in range(repeats)]
                finally:
                    stack.stop()
            result[f"service_{name}"] = {
                "post_to_running": _summary([running for running, _ in runs]),
                "post_to_first_step": _summary([step for _, step in runs]),
            }
            summary = result[f"service_{name}"]["post_to_first_step"]
            print(
                f"dispatch  {name}: POST->first step median {summary['median_s']}s p90 {summary['p90_s']}s", flush=True
            )
        from_the_shell(Path(scratch) / "shell-warmup")
        shell = [from_the_shell(Path(scratch) / f"shell{index}") for index in range(repeats)]
    result["shell_plain_spawn"] = _summary(shell)
    print(
        f"dispatch  shell plain spawn ->first step median {result['shell_plain_spawn']['median_s']}s "
        f"p90 {result['shell_plain_spawn']['p90_s']}s",
        flush=True,
    )
    return {"dispatch": result}
