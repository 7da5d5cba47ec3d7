"""Appends a job's events to the Redis stream that the service's collector reads.

Used by rank 0 (metrics, checkpoints) and the launcher (the final state). A Redis that is away
for a moment (restart) is waited for, within a bound, rather than failing the job.
"""

from __future__ import annotations

import logging
import time

import redis
from pydantic import BaseModel

from trainjobs.contract.events import JobEvent

log = logging.getLogger(__name__)


class EventReporter:
    def __init__(self, redis_url: str, stream: str, job_id: str, attempt: int, patience_seconds: float = 120.0):
        self.client = redis.Redis.from_url(redis_url, socket_timeout=10, socket_connect_timeout=5)
        self.stream = stream
        self.job_id = job_id
        self.attempt = attempt
        self.patience_seconds = patience_seconds

    def send(self, payload: BaseModel) -> None:
        fields = JobEvent.of(self.job_id, self.attempt, payload).to_stream_fields()
        deadline = time.monotonic() + self.patience_seconds
        while True:
            try:
                self.client.xadd(self.stream, fields)
                return
            except (redis.ConnectionError, redis.TimeoutError) as error:
                if time.monotonic() > deadline:
                    raise
                log.warning("redis unavailable (%s); retrying event %s", error, fields["kind"])
                time.sleep(1.0)

    def close(self) -> None:
        self.client.close()
