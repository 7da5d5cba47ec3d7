"""Where a run's events go: the Redis stream that the service's collector reads, or, for
`trainjobs train`, the console.

Used by the launcher (rank 0's metrics and checkpoints, relayed, and the final state) and the
worker (a job that could not start). A Redis that is away for a moment (restart) is waited for,
within a bound, rather than failing the job; one that restarted is sent again what it may have
lost.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis
from pydantic import BaseModel

from trainjobs.contract.events import CheckpointRecord, CheckpointRemoved, EpochMetrics, JobEvent, Progress, StateChange

log = logging.getLogger(__name__)
FLUSH_POLL_SECONDS = 0.05


# What must reach SQL once sent; progress and log lines are not kept for sending again.
KEPT_KINDS = (EpochMetrics, CheckpointRecord, CheckpointRemoved, StateChange)


class EventReporter:
    """Sends a run's events to the collector's stream, and keeps each one that matters (results,
    checkpoints, states) until the collector has applied it: the collector deletes an entry once
    its change is committed. A Redis restart (a new run id) may have lost entries not yet applied,
    without its data or in its last second before a crash: every event kept is then sent again,
    in order; the collector's apply is idempotent (an epoch is recorded once, a state changes once,
    a checkpoint row is keyed by its id)."""

    def __init__(self, client: redis.Redis, stream: str, job_id: str, attempt: int, patience_seconds: float = 120.0):
        self.client = client  # the process's one Redis client
        self.stream = stream
        self.job_id = job_id
        self.attempt = attempt
        self.patience_seconds = patience_seconds
        self.sent_again = 0  # events sent again after a Redis restart (the tests count them)
        self._kept: list[tuple[str, dict[Any, Any]]] = []  # (entry id, fields), not yet applied
        self._redis_run: str | None = None  # the Redis run the kept entries were added in
        self._lock = threading.Lock()  # the report relay and the log shipper send from two threads

    def send(self, payload: BaseModel) -> None:
        fields = dict[Any, Any](JobEvent.of(self.job_id, self.attempt, payload).to_stream_fields())
        self._patiently(lambda: self._add(fields, keep=isinstance(payload, KEPT_KINDS)), fields["kind"])

    def flush(self, timeout: float) -> bool:
        """Wait until the collector has applied every event kept (sending them again after a
        Redis restart); False when some are still waiting after `timeout` (the API is away)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with self._lock:
                    self._check_kept()
            except (redis.ConnectionError, redis.TimeoutError) as error:
                log.warning("redis unavailable (%s); waiting to see our events applied", error)
            if not self._kept:
                return True
            time.sleep(FLUSH_POLL_SECONDS)
        log.warning("job %s: %d event(s) not applied after %.0f s", self.job_id, len(self._kept), timeout)
        return False

    def _patiently(self, action: Callable[[], None], what: str) -> None:
        """A Redis away for a moment (a restart) is waited for, within `patience_seconds`."""
        deadline = time.monotonic() + self.patience_seconds
        while True:
            try:
                return action()
            except (redis.ConnectionError, redis.TimeoutError) as error:
                if time.monotonic() > deadline:
                    raise
                log.warning("redis unavailable (%s); retrying event %s", error, what)
                time.sleep(1.0)

    def _add(self, fields: dict[Any, Any], keep: bool) -> None:
        with self._lock:
            self._check_kept()
            if keep and self._redis_run is None:
                self._redis_run = self._current_redis_run()  # read before the entry is added
            entry_id = self.client.xadd(self.stream, fields)
            if keep:
                self._kept.append((_text(entry_id), fields))

    def _check_kept(self) -> None:
        """Forget the events applied; after a Redis restart, send every kept one again."""
        if not self._kept:
            self._redis_run = None
            return
        run = self._current_redis_run()
        if run != self._redis_run:
            log.warning("job %s: redis restarted; sending %d kept event(s) again", self.job_id, len(self._kept))
            self._kept = [(_text(self.client.xadd(self.stream, fields)), fields) for _, fields in self._kept]
            self.sent_again += len(self._kept)
            self._redis_run = run
            return
        pipe = self.client.pipeline(transaction=False)
        for entry_id, _ in self._kept:
            pipe.xrange(self.stream, entry_id, entry_id)
        self._kept = [kept for kept, found in zip(self._kept, pipe.execute(), strict=True) if found]

    def _current_redis_run(self) -> str:
        """Redis's run id, new at each start of the server (with its data kept or not)."""
        return str(self.client.info("server")["run_id"])


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


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
