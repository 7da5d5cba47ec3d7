"""The collector: reads job events from the Redis stream through a consumer group and writes
them to SQL, acknowledging each only after its transaction committed.

If this process dies, unacknowledged events stay pending in the group and are claimed again
(by this consumer on restart, or by another after `stale_after_ms`); each write is keyed by job
and epoch or checkpoint id, so applying an event twice changes nothing.
"""

from __future__ import annotations

import logging
from typing import Any

import redis
from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.events import (
    CheckpointRecord,
    CheckpointRemoved,
    EpochMetrics,
    JobEvent,
    StateChange,
)
from trainjobs.service import lifecycle
from trainjobs.service.db import transaction
from trainjobs.service.repositories import jobs

log = logging.getLogger(__name__)

GROUP = "collectors"


class EventCollector:
    def __init__(
        self,
        client: redis.Redis,
        sessions: sessionmaker[Session],
        stream: str,
        consumer: str,
        stale_after_ms: int = 30_000,
    ):
        self.client = client
        self.sessions = sessions
        self.stream = stream
        self.consumer = consumer
        self.stale_after_ms = stale_after_ms
        self._group_ready = False

    def poll(self, block_ms: int = 500, count: int = 100) -> int:
        """Apply what is waiting (pending first, then new); return how many events were applied."""
        self._ensure_group()
        entries = self._reclaim_pending(count)
        if not entries:
            reply: Any = self.client.xreadgroup(GROUP, self.consumer, {self.stream: ">"}, count=count, block=block_ms)
            entries = reply[0][1] if reply else []
        for entry_id, fields in entries:
            self._apply_entry(entry_id, fields)
        return len(entries)

    def _ensure_group(self) -> None:
        if self._group_ready:
            return
        try:
            self.client.xgroup_create(self.stream, GROUP, id="0", mkstream=True)
        except redis.ResponseError as error:
            if "BUSYGROUP" not in str(error):
                raise
        self._group_ready = True

    def _reclaim_pending(self, count: int) -> list[Any]:
        # Our own pending entries (delivered before a restart under this consumer name) and
        # entries another consumer left unacknowledged for too long.
        own: Any = self.client.xreadgroup(GROUP, self.consumer, {self.stream: "0"}, count=count)
        entries = own[0][1] if own else []
        if entries:
            return entries
        reclaimed: Any = self.client.xautoclaim(
            self.stream, GROUP, self.consumer, min_idle_time=self.stale_after_ms, count=count
        )
        return list(reclaimed[1])

    def _apply_entry(self, entry_id, fields) -> None:
        try:
            event = JobEvent.from_stream_fields(fields)
        except Exception:
            log.exception("dropping malformed event %s", entry_id)
        else:
            with transaction(self.sessions) as session:
                apply_event(session, event)
        # Acknowledged (and deleted, as nobody else reads the stream) only after the commit.
        self.client.xack(self.stream, GROUP, entry_id)
        self.client.xdel(self.stream, entry_id)


def apply_event(session: Session, event: JobEvent) -> None:
    job = jobs.get(session, event.job_id, for_update=True)
    if job is None:
        log.warning("event %s for unknown job %s dropped", event.kind, event.job_id)
        return
    payload = event.payload()
    match payload:
        case EpochMetrics():
            lifecycle.record_epoch(session, job, event.attempt, payload)
        case CheckpointRecord():
            lifecycle.record_checkpoint(session, job, payload)
        case CheckpointRemoved():
            lifecycle.remove_checkpoint(session, job, payload.id)
        case StateChange():
            try:
                lifecycle.finish(session, job, event.attempt, payload)
            except lifecycle.TransitionRefused as refused:
                log.info("state %s for job %s (attempt %s) ignored: %s", payload.state, job.id, event.attempt, refused)
