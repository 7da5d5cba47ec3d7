"""What a worker reports about itself in its heartbeat: one JSON value per host name in the
Redis hash `<namespace>:workers`, written by the worker, read by the service."""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, Protocol

from pydantic import BaseModel


class WorkerStatus(BaseModel):
    hostname: str
    device: str  # "cuda" or "cpu"
    slots: int  # devices (or cpu slots) it owns
    busy: int  # of those, leased to running jobs
    jobs: list[str]
    last_seen: float  # unix time of the last heartbeat

    def is_lost(self, now: float, lost_after_seconds: float) -> bool:
        return now - self.last_seen > lost_after_seconds

    @property
    def last_seen_at(self) -> datetime:
        return datetime.fromtimestamp(self.last_seen, UTC)


class HashReader(Protocol):
    """What the fleet reads need of a redis.Redis (the contract imports no Redis client)."""

    def hvals(self, name: str) -> Any: ...


def read_workers(client: HashReader, key: str) -> list[WorkerStatus]:
    """Every worker that ever reported, lost ones included."""
    return sorted((WorkerStatus.model_validate_json(raw) for raw in client.hvals(key)), key=lambda w: w.hostname)


def live_workers(client: HashReader, key: str, lost_after_seconds: float) -> list[WorkerStatus]:
    now = time.time()
    return [worker for worker in read_workers(client, key) if not worker.is_lost(now, lost_after_seconds)]
