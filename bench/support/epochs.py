"""When each epoch of a run trained, and how many samples: the plain loop's from its result file,
a service job's from its own reports (replayed from its event stream); and the plain loop as a
shell starts it."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def plain_process(
    spec: dict, scratch: str, name: str, threads: int, stdout: int | None = None
) -> tuple[subprocess.Popen, Path]:
    spec_file, result_file = Path(scratch) / f"{name}.spec.json", Path(scratch) / f"{name}.result.json"
    spec_file.write_text(json.dumps(spec))
    result_file.unlink(missing_ok=True)
    process = subprocess.Popen(
        [sys.executable, "-m", "bench.support.plain_ddp", str(spec_file), str(result_file), str(threads)],
        cwd=ROOT,
        start_new_session=True,
        stdout=stdout,
        text=True,
    )
    return process, result_file


def first_step_done(process: subprocess.Popen) -> threading.Event:
    """Set once the plain loop (started with its output piped) says its first optimizer step is
    done; its output is read to the end, so that it never blocks on a full pipe."""
    done = threading.Event()

    def read() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            if line.startswith("first optimizer step done"):
                done.set()

    threading.Thread(target=read, name="plain-output", daemon=True).start()
    return done


def plain_epochs(result_file: Path) -> list[tuple[float, float, float]]:
    """(start, end, samples) of each of the plain loop's epochs, wall clock."""
    result = json.loads(result_file.read_text())
    return [
        (start, end, samples)
        for (start, end), samples in zip(result["epoch_windows"], result["epoch_samples"], strict=True)
    ]


def local_epochs(run_path: Path) -> list[tuple[float, float, float]]:
    """(start, end, samples) of each epoch of a `trainjobs train` run, from its events.jsonl."""
    ends: dict[int, float] = {}
    metrics = []
    for line in (run_path / "events.jsonl").read_text().splitlines():
        event = json.loads(line)
        data = event["data"]
        if event["kind"] == "progress" and data["step"] == data["steps"]:
            ends[data["epoch"]] = datetime.fromisoformat(data["at"]).timestamp()
        elif event["kind"] == "metrics":
            metrics.append(data)
    return epochs_of(str(run_path), ends, metrics)


def service_epochs(client, job_id: str) -> list[tuple[float, float, float]]:
    """(start, end, samples) of each of the job's epochs: each ends at rank 0's end-of-epoch
    progress report (replayed from the job's event stream) and lasts its `epoch_seconds`."""
    ends: dict[int, float] = {}
    event = None
    with client.stream("GET", f"/v1/jobs/{job_id}/events") as stream:
        for line in stream.iter_lines():
            if line.startswith("event:"):
                event = line.partition(":")[2].strip()
            elif line.startswith("data:") and event == "progress":
                progress = json.loads(line.partition(":")[2])
                if progress["step"] == progress["steps"]:
                    ends[progress["epoch"]] = datetime.fromisoformat(progress["at"]).timestamp()
    return epochs_of(job_id, ends, client.get(f"/v1/jobs/{job_id}/metrics").json()["items"])


def epochs_of(run: str, ends: dict[int, float], metrics: list[dict]) -> list[tuple[float, float, float]]:
    """(start, end, samples) of each epoch of a run's `metrics`, given when each ended (`ends`)."""
    epochs = []
    for row in metrics:
        end = ends.get(row["epoch"])
        if end is None:
            raise RuntimeError(f"{run}: no end-of-epoch progress report for epoch {row['epoch']}")
        epochs.append((end - row["epoch_seconds"], end, row["samples_per_second"] * row["epoch_seconds"]))
    return epochs


def timed_offset(a_epochs: list[tuple[float, float, float]], b_epochs: list[tuple[float, float, float]]) -> float:
    """Seconds from the start of b's first timed epoch to a's (the epochs after the first)."""
    return round(a_epochs[1][0] - b_epochs[1][0], 2)


def wait_for_job(client, job_id: str, timeout: float = 1800) -> dict:
    """Polled every 2 s: a poll that arrives while the service is stopped waits for its turn,
    and is served (and paid for) in the service's turn."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = client.get(f"/v1/jobs/{job_id}").json()
        if job["state"] in ("succeeded", "failed", "cancelled"):
            return job
        time.sleep(2.0)
    raise TimeoutError(f"job {job_id} did not end within {timeout} s")
