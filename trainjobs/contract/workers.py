"""What a worker reports about itself in its heartbeat: one JSON value per host name in the
Redis hash `<namespace>:workers`, written by the worker, read by the service."""

from __future__ import annotations

import logging
import time
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)


LATEST_TIMESTAMP = 253_402_300_799.0  # 9999-12-31T23:59:59Z, the last a datetime can hold


class WorkerStatus(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)

    hostname: str = Field(min_length=1, max_length=256)
    device: Literal["cuda", "cpu"]
    slots: int = Field(ge=1, le=4096)  # devices (or cpu slots) it owns
    busy: int = Field(ge=0, le=4096)  # of those, leased to running jobs
    jobs: list[str] = Field(max_length=4096)
    last_seen: float = Field(ge=0.0, le=LATEST_TIMESTAMP)  # unix time of the last heartbeat
    sandbox: bool = False  # it can run a job's own code (its sandbox tool is there)

    def is_lost(self, now: float, lost_after_seconds: float) -> bool:
        return now - self.last_seen > lost_after_seconds

    @property
    def last_seen_at(self) -> datetime:
        return datetime.fromtimestamp(self.last_seen, UTC)


class HashReader(Protocol):
    """What the fleet reads need of a redis.Redis (the contract imports no Redis client)."""

    def hvals(self, name: str) -> Any: ...


def read_workers(client: HashReader, key: str) -> list[WorkerStatus]:
    """Every worker that ever reported, lost ones included. An entry that is not a worker's
    status (anyone who can write to Redis can put one there) is skipped with a log line."""
    workers = []
    for raw in client.hvals(key):
        try:
            workers.append(WorkerStatus.model_validate_json(raw))
        except ValueError as error:
            log.warning("skipping a malformed entry in %s: %s", key, str(error).splitlines()[0])
    return sorted(workers, key=lambda worker: worker.hostname)


def live_workers(client: HashReader, key: str, lost_after_seconds: float) -> list[WorkerStatus]:
    now = time.time()
    return [worker for worker in read_workers(client, key) if not worker.is_lost(now, lost_after_seconds)]
