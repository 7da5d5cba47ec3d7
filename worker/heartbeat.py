"""The worker's heartbeat: every few seconds it writes what it owns and runs to a Redis hash,
which `GET /v1/workers` and the service's scheduling checks read."""

from __future__ import annotations

import logging
import threading
import time

import redis

from trainjobs.contract.workers import WorkerStatus
from worker.devices import DevicePool

log = logging.getLogger(__name__)


class Heartbeat:
    def __init__(self, redis_url: str, key: str, hostname: str, pool: DevicePool, every_seconds: float):
        self.client = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=5)
        self.key = key
        self.hostname = hostname
        self.pool = pool
        self.every_seconds = every_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainjobs-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def beat(self) -> None:
        status = WorkerStatus(hostname=self.hostname, device=self.pool.kind, slots=self.pool.size,
                              busy=self.pool.busy, jobs=self.pool.jobs(), last_seen=time.time())
        self.client.hset(self.key, self.hostname, status.model_dump_json())

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.beat()
            except redis.RedisError as error:
                log.warning("heartbeat not sent: %s", error)
            self._stop.wait(self.every_seconds)
