"""The API's background work, on one thread of one API process at a time (the leader, see
service.leadership): the collector, and every few seconds the reaper (lost workers' jobs), the
sharing of the fleet (preemptions and waiting reasons: service.sharing), the outbox sweeper, the
checkpoint store's deletions tried again (service.store_deletions) and
(each minute, when `TRAINJOBS_RETENTION_DAYS` is set) the retention sweep. Each step is guarded
on its own, so one that fails never stops the others; the collector backs off (capped) while SQL
or Redis is away. The other API processes' loops wait, trying for the lead each second."""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Callable

import redis
from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.workers import live_workers
from trainjobs.service import dispatch, fleet, reaper, retention, sharing, store_deletions
from trainjobs.service.collector import EventCollector
from trainjobs.service.leadership import Leadership
from trainjobs.settings import Settings
from trainjobs.store import CheckpointStore

log = logging.getLogger(__name__)

RETENTION_EVERY_SECONDS = 60.0
FOLLOWER_WAIT_SECONDS = 1.0
# The collector waits on the stream at most this long per turn, and never past the next sweep: an
# event ends the wait at once, so a longer wait costs no latency, only fewer idle turns (each
# a few Redis round trips) while jobs train on the same cores.
COLLECTOR_WAIT_SECONDS = 2.0


class BackgroundLoop:
    def __init__(
        self,
        settings: Settings,
        sessions: sessionmaker[Session],
        dispatcher: dispatch.Dispatcher,
        client: redis.Redis,
        store: CheckpointStore,
    ):
        self.settings = settings
        self.store = store
        self.sessions = sessions
        self.dispatcher = dispatcher
        self.redis = client  # the API process's one Redis client
        self.collector = EventCollector(
            self.redis,
            sessions,
            settings.keys,
            # A name stable across restarts, so a restarted API resumes its own pending events at once.
            consumer=socket.gethostname(),
            max_failures=settings.collector_max_failures,
            log_lines_cap=settings.log_lines_per_job,
            max_attempts=settings.max_attempts,
            store=store,
        )
        self.leadership = Leadership(self.redis, settings.keys.background_leader)
        self._next_retention = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="trainjobs-background", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.leadership.release()

    def _sweep(self) -> None:
        """Each step on its own: one that raises (SQL or Redis away, a bad row) is logged and
        leaves the others to run."""
        settings = self.settings
        self._guarded("reap", lambda: reaper.requeue_lost_jobs(self.sessions, settings.max_attempts))
        self._guarded("share", self._share_fleet)
        self._guarded("dispatch", lambda: dispatch.sweep(self.dispatcher, settings.outbox_grace_seconds))
        self._guarded("retention", self._apply_retention)
        self._guarded("store deletions", lambda: store_deletions.sweep(self.sessions, self.store))
        self._guarded(
            "forget workers",
            lambda: fleet.forget_long_lost(self.redis, settings.keys.workers, settings.forget_workers_after_seconds),
        )

    def _apply_retention(self) -> None:
        days = self.settings.retention_days
        if days is None or time.monotonic() < self._next_retention:
            return
        deleted = retention.delete_expired(self.sessions, self.store, days)
        # A full batch means more are due: go on at the next sweep.
        self._next_retention = time.monotonic() + (0.0 if deleted >= retention.BATCH else RETENTION_EVERY_SECONDS)

    def _share_fleet(self) -> None:
        settings = self.settings
        workers = live_workers(self.redis, settings.keys.workers, settings.worker_lost_seconds)
        sharing.share_fleet(self.sessions, workers, settings)

    @staticmethod
    def _guarded(step: str, run: Callable[[], object]) -> None:
        try:
            run()
        except Exception:
            log.exception("background step %r failed; the others go on", step)

    def _run(self) -> None:
        next_sweep = 0.0
        backoff = 0.5
        while not self._stop.is_set():
            # Checked before the sweep and again before the collector (a sweep can outlast the
            # lock): a process that lost the lead, paused past its lock's expiry, does nothing
            # more once another has taken over.
            if not self.leadership.hold():
                self._stop.wait(FOLLOWER_WAIT_SECONDS)
                continue
            if time.monotonic() >= next_sweep:
                self._sweep()
                next_sweep = time.monotonic() + self.settings.sweep_interval_seconds
                if not self.leadership.hold():
                    continue
            wait = min(max(next_sweep - time.monotonic(), 0.05), COLLECTOR_WAIT_SECONDS)
            try:
                self.collector.poll(block_ms=int(wait * 1000))
                backoff = 0.5
            except Exception as error:
                # SQL or Redis away: the entries stay pending; wait and try again.
                log.warning("collector: %s; retrying in %.1fs", error, backoff)
                self._stop.wait(backoff)
                backoff = min(backoff * 2, 10.0)
