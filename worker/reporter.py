"""Where a run's events go: the Redis stream that the service's collector reads, or, for
`trainjobs train`, the console.

Used by rank 0 (metrics, checkpoints) and the launcher (the final state). A Redis that is away
for a moment (restart) is waited for, within a bound, rather than failing the job.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import redis
from pydantic import BaseModel

from trainjobs.contract.events import CheckpointRecord, CheckpointRemoved, EpochMetrics, JobEvent, Progress, StateChange

log = logging.getLogger(__name__)


class EventReporter:
    def __init__(self, client: redis.Redis, stream: str, job_id: str, attempt: int, patience_seconds: float = 120.0):
        self.client = client  # the process's one Redis client
        self.stream = stream
        self.job_id = job_id
        self.attempt = attempt
        self.patience_seconds = patience_seconds

    def send(self, payload: BaseModel) -> None:
        fields = JobEvent.of(self.job_id, self.attempt, payload).to_stream_fields()
        deadline = time.monotonic() + self.patience_seconds
        while True:
            try:
                self.client.xadd(self.stream, dict[Any, Any](fields))
                return
            except (redis.ConnectionError, redis.TimeoutError) as error:
                if time.monotonic() > deadline:
                    raise
                log.warning("redis unavailable (%s); retrying event %s", error, fields["kind"])
                time.sleep(1.0)


class ConsoleReporter:
    """`trainjobs train`: one readable line per event on standard output; each epoch's metrics
    appended as a JSON line to `metrics.jsonl` in the run directory, and every event (metrics,
    progress, checkpoints) to `events.jsonl`, as the service's event stream carries it (a JobEvent:
    job_id, attempt, kind, data), for tools that read a local run as they read a job's events."""

    def __init__(self, run_path: Path, job_id: str, attempt: int):
        self.metrics_file = run_path / "metrics.jsonl"
        self.events_file = run_path / "events.jsonl"
        self.job_id = job_id
        self.attempt = attempt

    def send(self, payload: BaseModel) -> None:
        with open(self.events_file, "a") as file:
            file.write(JobEvent.of(self.job_id, self.attempt, payload).model_dump_json() + "\n")
        if isinstance(payload, EpochMetrics):
            with open(self.metrics_file, "a") as file:
                file.write(payload.model_dump_json() + "\n")
        match payload:
            case EpochMetrics():
                accuracy = f" val_acc {payload.val_accuracy:.4f}" if payload.val_accuracy is not None else ""
                line = (
                    f"epoch {payload.epoch}: train_loss {payload.train_loss:.4f} val_loss {payload.val_loss:.4f}"
                    f"{accuracy} lr {payload.lr:.3g} {payload.epoch_seconds:.2f}s "
                    f"{payload.samples_per_second:.1f} samples/s"
                )
            case CheckpointRecord():
                line = f"checkpoint {payload.path}{' (best)' if payload.is_best else ''}"
            case CheckpointRemoved():
                line = f"checkpoint {payload.id} rotated out"
            case Progress():
                eta = f", ETA {payload.eta_seconds:.0f}s" if payload.eta_seconds is not None else ""
                line = (
                    f"epoch {payload.epoch}: step {payload.step}/{payload.steps}, "
                    f"{payload.samples_per_second:.1f} samples/s{eta}"
                )
            case StateChange():
                line = f"{payload.state} ({payload.stop_reason})" + (f": {payload.error}" if payload.error else "")
            case _:
                line = payload.model_dump_json()
        print(line, flush=True)
