"""A worker's ear for job-state notices (trainjobs.contract.notices): one thread per worker
process, subscribed to the job-state channel, that wakes the watch of a job it runs when a notice
says that job is no longer simply running (cancelling, requeued, ended). A job that is still
running, with a new epoch or progress, is no news to its watch.

The watch of a running job (trainjobs.worker.job_runner) sleeps on the event it gets here, and
reads SQL only when woken or when its lease is due for renewal: cancel reaches the ranks within
moments, and a training job costs the database one short transaction per renewal.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager

import redis

from trainjobs.contract.notices import read_state_notice
from trainjobs.contract.redis_keys import RedisKeys

log = logging.getLogger(__name__)

RECONNECT_SECONDS = 1.0


class StateNotices:
    def __init__(self, redis_url: str, namespace: str):
        self.channel = RedisKeys(namespace).job_state_channel
        # Its own client with no read timeout: a subscription is silent until a job changes. Named
        # after the channel, so that `CLIENT LIST` shows whose it is.
        self.client = redis.Redis.from_url(
            redis_url, socket_timeout=None, socket_connect_timeout=10, client_name=f"notices:{self.channel}"
        )
        self._watched: dict[str, list[threading.Event]] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="trainjobs-state-notices", daemon=True)

    def start(self) -> StateNotices:
        self._thread.start()
        return self

    @contextmanager
    def watch(self, job_id: str) -> Iterator[threading.Event]:
        """An event set whenever a notice says `job_id` is in a state other than running, for as
        long as the block runs."""
        woken = threading.Event()
        with self._lock:
            self._watched.setdefault(job_id, []).append(woken)
        try:
            yield woken
        finally:
            with self._lock:
                self._watched[job_id].remove(woken)
                if not self._watched[job_id]:
                    del self._watched[job_id]

    def close(self) -> None:
        self._stop.set()
        self.client.close()

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                with self.client.pubsub(ignore_subscribe_messages=True) as pubsub:
                    pubsub.subscribe(self.channel)
                    for message in pubsub.listen():
                        self._wake(message.get("data"))
            except (redis.RedisError, OSError, ValueError) as error:
                if self._stop.is_set():
                    return
                # Jobs are still watched: their renewals read SQL meanwhile.
                log.warning("job-state notices: %s; subscribing again in %.0f s", error, RECONNECT_SECONDS)
                self._stop.wait(RECONNECT_SECONDS)

    def _wake(self, data: object) -> None:
        if not isinstance(data, bytes | str):
            return
        job_id, state = read_state_notice(data)
        if state == "running":
            return
        with self._lock:
            for woken in self._watched.get(job_id, ()):
                woken.set()
