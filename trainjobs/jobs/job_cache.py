"""Each job's current version and document, kept in Redis, so that polling a job costs the API
no SQL: `GET /v1/jobs/{id}` answers a 304 or the document from here.

A job's version is its `event_seq`: every change to a job's document appends a job event in the
same transaction (`timeline`), which numbers it. The ETag is `"<job id>-<event_seq>"`.

Redis holds `<namespace>:job:<id>`, either `<seq>\\n<owner as JSON>\\n<document JSON>` (what SQL
has committed) or `p<seq>` (a transaction is writing version `seq`: ask SQL). How it stays true:
- a transition that changes a job marks it `p<seq>` (`publish_after_commit`), before its commit;
- after its commit it publishes the version and document, unless the key names a later version;
- a poll that finds nothing reads SQL and fills the key only if it is still absent.
So a process killed between its commit and its publish leaves the mark: polls read SQL until it
expires. Every key expires after `TTL_SECONDS`, which bounds the one case this cannot cover: a
change committed while its process could not reach Redis at all (that is logged).

A deleted job's key is left marked, with nothing to publish over it: polls read SQL (404).

After the commit the writer also announces each changed job's state on the job-state channel
(trainjobs.contract.notices): the worker running that job wakes at once for a cancel, instead of
reading SQL every second.

Each job-life transition (trainjobs.jobs.lifecycle) calls `publish_after_commit` itself; the
writer that publishes is the session factory's (trainjobs.jobs.db.make_session_factory takes one),
and a transition in a session without one refuses to run rather than leave the cache stale.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass

import redis
import redis.asyncio
from redis.commands.core import Script
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.notices import state_notice
from trainjobs.contract.redis_keys import RedisKeys
from trainjobs.jobs import timeline
from trainjobs.jobs.tables import JobRow

log = logging.getLogger(__name__)

TTL_SECONDS = 60

# Both scripts keep the key at the highest version any writer has named: a slower writer of an
# older version never overwrites a newer one.
_NEWER_KNOWN = """
local current = redis.call('GET', KEYS[1])
if current then
  local seq = tonumber(string.match(current, '^p?(%d+)'))
  if seq and seq > tonumber(ARGV[1]) then return 0 end
end
"""
_PUBLISH = _NEWER_KNOWN + "redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[3]) return 1"
_MARK = _NEWER_KNOWN + "redis.call('SET', KEYS[1], 'p' .. ARGV[1], 'EX', ARGV[2]) return 1"

_WRITER = "job_cache.writer"  # session.info: the JobCacheWriter of the session's factory
_PENDING = "job_cache.pending"  # session.info: job id -> its row, changed in this transaction


@dataclass(frozen=True)
class CachedJob:
    seq: int
    owner: str
    document: bytes  # the job document's JSON

    def etag(self, job_id: str) -> str:
        return f'"{job_id}-{self.seq}"'

    def stored(self) -> bytes:
        """As Redis holds it: version, owner (as JSON, so on one line) and document."""
        return f"{self.seq}\n{json.dumps(self.owner)}\n".encode() + self.document


def cached_form(job: JobRow) -> CachedJob:
    return CachedJob(job.event_seq or 0, job.owner, timeline.document(job).model_dump_json().encode())


# ---- what a job-life transition calls (trainjobs.jobs.lifecycle) ----------------------------------


def publish_after_commit(session: Session, job: JobRow, new: bool = False) -> None:
    """The job's document changed in this transaction (its new version is `job.event_seq`): mark
    its key now, so polls read SQL until the change is published; once the transaction commits,
    publish the version and document and announce the job's state to the workers.

    A session whose factory was made without a JobCacheWriter (read-only sessions) refuses:
    a job change that nobody publishes would leave polls answering an old version."""
    writer = _writer_of(session, job.id)
    session.info.setdefault(_PENDING, {})[job.id] = job
    if not new:  # a new job has no key yet (nobody could have read it): nothing can go stale
        writer.mark(job.id, job.event_seq)


def mark_deleted(session: Session, job: JobRow) -> None:
    """The job is being deleted: its key stays marked past its last version, with nothing to
    publish over it, so polls read SQL (and find nothing)."""
    _writer_of(session, job.id).mark(job.id, (job.event_seq or 0) + 1)
    session.info.get(_PENDING, {}).pop(job.id, None)


def _writer_of(session: Session, job_id: str) -> JobCacheWriter:
    writer = session.info.get(_WRITER)
    if writer is None:
        raise RuntimeError(
            f"job {job_id} changed in a session that cannot publish job changes: make its factory with "
            "make_session_factory(engine, job_cache=JobCacheWriter(...))"
        )
    assert isinstance(writer, JobCacheWriter)
    return writer


class JobCacheWriter:
    """Marks and publishes the job changes that transitions report (`publish_after_commit`), and
    announces their committed states. trainjobs.jobs.db.make_session_factory attaches one to
    every factory of sessions that may change jobs (the API's, its background loop's, a worker's)."""

    def __init__(self, client: redis.Redis, keys: RedisKeys):
        self.client = client
        self.keys = keys
        self._publish = client.register_script(_PUBLISH)
        self._mark = client.register_script(_MARK)

    def attach(self, sessions: sessionmaker[Session]) -> None:
        """Publish what the transitions of these sessions report, after each commit."""
        sessions.kw.setdefault("info", {})[_WRITER] = self
        event.listen(sessions, "after_commit", self._after_commit)
        event.listen(sessions, "after_soft_rollback", self._after_rollback)

    def _after_commit(self, session: Session) -> None:
        for job_id, job in session.info.pop(_PENDING, {}).items():
            self.publish(job_id, cached_form(job))
            self.announce(job_id, job.state)

    def _after_rollback(self, session: Session, _previous: object) -> None:
        # A rolled-back change's marks stay until they expire: polls read SQL meanwhile.
        session.info.pop(_PENDING, None)

    def mark(self, job_id: str, seq: int) -> None:
        """Version `seq` is being written: polls go to SQL until it is published."""
        self._call("mark", self._mark, job_id, seq, TTL_SECONDS)

    def publish(self, job_id: str, cached: CachedJob) -> None:
        """A committed version, unless Redis already names a later one."""
        self._call("publish", self._publish, job_id, cached.seq, cached.stored(), TTL_SECONDS)

    def announce(self, job_id: str, state: str) -> None:
        """Tell the workers the job's committed state (the one running it reads SQL if it matters)."""
        try:
            self.client.publish(self.keys.job_state_channel, state_notice(job_id, state))
        except redis.RedisError as error:
            log.warning(
                "could not announce job %s's new state (its worker reads it at its next renewal): %s", job_id, error
            )

    def _call(self, what: str, script: Script, job_id: str, *args: str | int | bytes) -> None:
        try:
            script(keys=[self.keys.job(job_id)], args=list(args))
        except redis.RedisError as error:
            log.warning(
                "could not %s job %s in Redis (a poll may miss this change for up to %d s): %s",
                what,
                job_id,
                TTL_SECONDS,
                error,
            )


class JobCache:
    """The API's side, on its event loop: what Redis holds of a job, and filling it in from SQL
    when it holds nothing."""

    def __init__(self, client: redis.asyncio.Redis, keys: RedisKeys):
        self.client = client
        self.keys = keys

    async def lookup(self, job_id: str) -> CachedJob | None:
        """The committed version and document, or None (not held, being written, or Redis away)."""
        try:
            value = await self.client.get(self.keys.job(job_id))
        except redis.RedisError:
            return None
        if isinstance(value, str):  # a client made with decode_responses
            value = value.encode()
        if value is None or value.startswith(b"p"):
            return None
        seq, owner, document = value.split(b"\n", 2)
        return CachedJob(int(seq), json.loads(owner), document)

    async def remember(self, job_id: str, cached: CachedJob) -> None:
        """Fill in what SQL said, unless a writer has marked or published meanwhile."""
        try:
            await self.client.set(self.keys.job(job_id), cached.stored(), nx=True, ex=TTL_SECONDS)
        except redis.RedisError:
            pass
