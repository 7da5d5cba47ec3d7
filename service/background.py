"""The API process's background work, on one thread: the collector, and every few seconds the
reaper (lost workers' jobs), the waiting-reason check and the outbox sweeper. Errors (Redis or
SQL away) are logged and retried with a capped back-off."""

from __future__ import annotations

import logging
import socket
import threading
import time

import redis
from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.workers import live_workers
from trainjobs.service import dispatch, reaper
from trainjobs.service.collector import EventCollector
from trainjobs.settings import Settings

log = logging.getLogger(__name__)

EXPLAIN_EVERY_SECONDS = 5.0


class BackgroundLoop:
    def __init__(
        self, settings: Settings, sessions: sessionmaker[Session], dispatcher: dispatch.Dispatcher, client: redis.Redis
    ):
        self.settings = settings
        self.sessions = sessions
        self.dispatcher = dispatcher
        self.redis = client  # the API process's one Redis client
        self.collector = EventCollector(
            self.redis,
            sessions,
            settings.events_stream,
            # A name stable across restarts, so a restarted API resumes its own pending events at once.
            consumer=socket.gethostname(),
        )
        self._last_fleet: list | None = None
        self._next_explain = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainjobs-background", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _sweep(self) -> None:
        settings = self.settings
        reaper.requeue_lost_jobs(self.sessions, settings.max_attempts)
        workers = live_workers(self.redis, settings.workers_key, settings.worker_lost_seconds)
        # Waiting reasons depend on the fleet: re-read the queue when it changed, else now and then.
        fleet = sorted((worker.device, worker.slots) for worker in workers)
        if fleet != self._last_fleet or time.monotonic() >= self._next_explain:
            changed = reaper.explain_waiting_jobs(self.sessions, workers)
            # A full batch means more reasons are due: the next sweep goes on with them.
            wait = 0.0 if changed >= reaper.EXPLAIN_BATCH else EXPLAIN_EVERY_SECONDS
            self._last_fleet, self._next_explain = fleet, time.monotonic() + wait
        dispatch.sweep(self.dispatcher, settings.outbox_grace_seconds)

    def _run(self) -> None:
        next_sweep = 0.0
        backoff = 0.5
        while not self._stop.is_set():
            try:
                if time.monotonic() >= next_sweep:
                    self._sweep()
                    next_sweep = time.monotonic() + self.settings.sweep_interval_seconds
                self.collector.poll(block_ms=500)
                backoff = 0.5
            except Exception as error:
                log.warning("background loop: %s; retrying in %.1fs", error, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
