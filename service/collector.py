"""The collector: reads job events from the Redis stream through a consumer group and writes
them to SQL, acknowledging each only after its transaction committed.

If this process dies, unacknowledged events stay pending in the group and are claimed again
(by this consumer on restart, or by another after `stale_after_ms`); each write is keyed by job
and epoch or checkpoint id, so applying an event twice changes nothing. An entry that cannot be
applied is set aside in the dead-letter stream `<stream>:dead`, with the error, and never holds
up the entries behind it (`_handle_entry`).
"""

from __future__ import annotations

import logging
import time
from typing import Any

import redis
from pydantic import ValidationError
from sqlalchemy.exc import DisconnectionError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.checkpoints import checkpoint_path
from trainjobs.contract.events import (
    CheckpointRecord,
    CheckpointRemoved,
    EpochMetrics,
    JobEvent,
    LogLines,
    Progress,
    StateChange,
)
from trainjobs.contract.redis_keys import RedisKeys
from trainjobs.jobs import lifecycle
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import job_logs, jobs
from trainjobs.jobs.tables import JobRow
from trainjobs.service import store_deletions
from trainjobs.store import CheckpointStore

log = logging.getLogger(__name__)

GROUP = "collectors"
DEAD_LETTERS_KEPT = 10_000  # the dead-letter stream is trimmed to about this many entries
DEFAULT_LOG_LINES_CAP = 50_000  # TRAINJOBS_LOG_LINES_PER_JOB
DEFAULT_MAX_ATTEMPTS = 3  # TRAINJOBS_MAX_ATTEMPTS
RECLAIM_EVERY_SECONDS = 5.0  # or every stale_after_ms, if shorter


class EventCollector:
    def __init__(
        self,
        client: redis.Redis,
        sessions: sessionmaker[Session],
        keys: RedisKeys,
        consumer: str,
        stale_after_ms: int = 30_000,
        max_failures: int = 3,
        log_lines_cap: int = DEFAULT_LOG_LINES_CAP,
        max_attempts: int = DEFAULT_MAX_ATTEMPTS,
        store: CheckpointStore | None = None,
    ):
        self.client = client
        self.store = store  # where rotated-out checkpoint files are deleted (None: left)
        self.sessions = sessions
        self.stream = keys.events
        self.dead_letters = keys.dead_letters
        self.consumer = consumer
        self.stale_after_ms = stale_after_ms
        self.max_failures = max_failures
        self.log_lines_cap = log_lines_cap
        self.max_attempts = max_attempts
        self._failures: dict[str, int] = {}  # entry id -> failed applications, in this process
        self._group_ready = False
        self._next_reclaim = 0.0  # monotonic; the first poll looks at once (a restart's pending entries)

    def poll(self, block_ms: int = 500, count: int = 100) -> int:
        """Apply what is waiting (pending first, then new); return how many entries were handled.

        A consumer group that is gone (destroyed, its stream deleted, Redis restarted without its
        data) is made again at the next poll, from the stream's start: every entry still in the
        stream is applied again, which changes nothing for those already applied."""
        try:
            return self._poll(block_ms, count)
        except redis.ResponseError as error:
            if "NOGROUP" not in str(error):
                raise
            log.warning("the collectors' consumer group is gone (%s); making it again", error)
            self._group_ready, self._next_reclaim = False, 0.0
            return 0

    def _poll(self, block_ms: int, count: int) -> int:
        self._ensure_group()
        entries = self._reclaim_pending(count) if self._reclaim_due() else []
        if entries:
            self._next_reclaim = 0.0  # found some: more may be pending (ours or stale), look again next poll
        else:
            reply: Any = self.client.xreadgroup(GROUP, self.consumer, {self.stream: ">"}, count=count, block=block_ms)
            entries = reply[0][1] if reply else []
        try:
            for entry_id, fields in entries:
                self._handle_entry(_text(entry_id), fields)
        except Exception:
            self._next_reclaim = 0.0  # SQL away: what was delivered stays pending, for the next poll
            raise
        return len(entries)

    def _reclaim_due(self) -> bool:
        """Pending entries are rare (a restart, a failed application, a consumer that died), so
        they are looked for on the first poll, while a failed entry waits for its next try, and
        then every few seconds, not on every poll: two Redis round trips fewer per turn of the
        background loop while jobs train."""
        now = time.monotonic()
        if self._failures or now >= self._next_reclaim:
            self._next_reclaim = now + min(self.stale_after_ms / 1000, RECLAIM_EVERY_SECONDS)
            return True
        return False

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
        # Our own pending entries (delivered before a restart under this consumer name, or left
        # by a failed application) and entries another consumer left unacknowledged for too long.
        own: Any = self.client.xreadgroup(GROUP, self.consumer, {self.stream: "0"}, count=count)
        entries = own[0][1] if own else []
        if entries:
            return list(entries)
        reclaimed: Any = self.client.xautoclaim(
            self.stream, GROUP, self.consumer, min_idle_time=self.stale_after_ms, count=count
        )
        return list(reclaimed[1])

    def _handle_entry(self, entry_id: str, fields: dict[Any, Any]) -> None:
        """Apply one entry in its own transaction. Nothing one entry holds can stop the others:
        - one that can never apply (malformed, out of bounds, speaking for another job's
          checkpoints) goes to the dead-letter stream at once;
        - one whose transaction fails is retried on the next polls, and dead-lettered after
          `max_failures` tries;
        - only SQL being away is raised (the caller backs off), and then the entry stays pending:
          an outage loses nothing.
        """
        try:
            event = JobEvent.from_stream_fields(fields)
            with transaction(self.sessions) as session:
                rotated_out = apply_event(session, event, self.log_lines_cap, self.max_attempts)
                if self.store is not None:
                    store_deletions.record(session, rotated_out)
        except (ValidationError, ValueError, KeyError, lifecycle.ForeignRecord) as refused:
            self._dead_letter(entry_id, fields, f"refused: {refused}")
            return
        except (OperationalError, InterfaceError, DisconnectionError):
            raise
        except Exception as error:
            failures = self._failures.get(entry_id, 0) + 1
            if failures < self.max_failures:
                self._failures[entry_id] = failures
                log.warning("event %s failed to apply (try %d of %d): %s", entry_id, failures, self.max_failures, error)
                return
            self._dead_letter(entry_id, fields, f"failed {failures} times: {error}")
            return
        if self.store is not None:  # once the row's removal has committed: its files
            store_deletions.delete_now(self.store, rotated_out)
        self._acknowledge(entry_id)

    def _dead_letter(self, entry_id: str, fields: dict[Any, Any], why: str) -> None:
        log.error("event %s set aside in %s: %s", entry_id, self.dead_letters, why)
        record: dict[Any, Any] = {_text(key): _text(value) for key, value in fields.items()}
        record.update(entry_id=entry_id, error=why[:4096])
        self.client.xadd(self.dead_letters, record, maxlen=DEAD_LETTERS_KEPT, approximate=True)
        self._acknowledge(entry_id)

    def _acknowledge(self, entry_id: str) -> None:
        # Acknowledged (and deleted, as nobody else reads the stream) only after the commit.
        self.client.xack(self.stream, GROUP, entry_id)
        self.client.xdel(self.stream, entry_id)
        self._failures.pop(entry_id, None)


def _text(value: bytes | str) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def apply_event(
    session: Session,
    event: JobEvent,
    log_lines_cap: int = DEFAULT_LOG_LINES_CAP,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
) -> list[str]:
    """Apply one event; returns the store paths of checkpoint files to delete once it commits
    (a rotation of the job's current attempt). Files are deleted here, not by the attempt that
    rotated them out: an attempt that lives on after the job moved past it (a worker cut off)
    would delete files that the job's next attempt inherited and lists."""
    job = jobs.get(session, event.job_id, for_update=True)
    if job is None:
        log.warning("event %s for unknown job %s dropped", event.kind, event.job_id)
        return []
    payload = event.payload()
    match payload:
        case EpochMetrics():
            lifecycle.record_epoch(session, job, event.attempt, payload)
        case CheckpointRecord() | CheckpointRemoved():
            return _apply_checkpoint_event(session, job, event.attempt, payload)
        case Progress():
            lifecycle.record_progress(session, job, event.attempt, payload)
        case LogLines():
            job_logs.append(session, job.id, event.attempt, payload, log_lines_cap)
        case StateChange(state="queued"):
            # A preempted job's ranks stopped after its checkpoint (recorded before this, in
            # stream order): it goes back to the queue. Or a node of a multi-node job lost its
            # peers (a host went away): the whole job goes back, as when a worker's lease runs out.
            if event.attempt == job.attempt and job.state == "preempting":
                lifecycle.preempted(session, job, "it stopped after its checkpoint at the step it was in", stopped=True)
            elif event.attempt == job.attempt and job.state == "running":
                lifecycle.requeue_or_give_up(session, job, payload.error or "a node was lost", max_attempts)
        case StateChange():
            try:
                lifecycle.finish(session, job, event.attempt, payload)
            except lifecycle.TransitionRefused as refused:
                log.info("state %s for job %s (attempt %s) ignored: %s", payload.state, job.id, event.attempt, refused)
    return []


def _apply_checkpoint_event(
    session: Session, job: JobRow, attempt: int, payload: CheckpointRecord | CheckpointRemoved
) -> list[str]:
    """Checkpoints of the job's current attempt only; a rotation returns the files to delete."""
    if isinstance(payload, CheckpointRecord):
        if not lifecycle.record_checkpoint(session, job, attempt, payload):
            log.info("checkpoint %s of job %s's attempt %d ignored: it is at %d", payload.id, job.id, attempt,
                     job.attempt)  # fmt: skip
        return []
    if lifecycle.remove_checkpoint(session, job, attempt, payload.id):
        # The attempt's own file, or one it inherited from an earlier attempt's checkpoint.
        return [checkpoint_path(job.id, payload.id, earlier) for earlier in range(1, attempt + 1)]
    log.info("removal of checkpoint %s by job %s's attempt %d ignored: it is at %d", payload.id, job.id, attempt,
             job.attempt)  # fmt: skip
    return []
