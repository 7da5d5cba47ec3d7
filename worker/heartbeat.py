"""The worker's heartbeat: every few seconds it writes what it owns and runs to a Redis hash,
which `GET /v1/workers` and the service's scheduling checks read."""

from __future__ import annotations

import logging
import threading
import time

import redis

from trainjobs.contract.workers import WorkerStatus
from trainjobs.worker.devices import DevicePool

log = logging.getLogger(__name__)


class Heartbeat:
    def __init__(
        self, client: redis.Redis, key: str, hostname: str, pool: DevicePool, every_seconds: float, sandbox: bool
    ):
        self.client = client
        self.sandbox = sandbox
        self.key = key
        self.hostname = hostname
        self.pool = pool
        self.every_seconds = every_seconds
        # A daemon thread: it beats for as long as the worker process lives, and no longer.
        self._thread = threading.Thread(target=self._run, name="trainjobs-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def beat(self) -> None:
        status = WorkerStatus(
            hostname=self.hostname,
            device=self.pool.kind,
            slots=self.pool.size,
            busy=self.pool.busy,
            jobs=self.pool.jobs(),
            last_seen=time.time(),
            sandbox=self.sandbox,
        )
        self.client.hset(self.key, self.hostname, status.model_dump_json())

    def _run(self) -> None:
        while True:
            try:
                self.beat()
            except redis.RedisError as error:
                log.warning("heartbeat not sent: %s", error)
            time.sleep(self.every_seconds)
