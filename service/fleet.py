"""The fleet as a caller may see it: every worker, with only the caller's own job ids among
those it runs (an admin sees them all)."""

from __future__ import annotations

import time

import redis
from sqlalchemy.orm import Session

from trainjobs.contract.workers import WorkerStatus
from trainjobs.jobs.repositories import jobs
from trainjobs.service.auth import Principal


def visible_workers(session: Session, caller: Principal, workers: list[WorkerStatus]) -> list[WorkerStatus]:
    if caller.is_admin:
        return workers
    running = {job_id for worker in workers for job_id in worker.jobs}
    own = jobs.owned_by(session, caller.owner, running) if running else set()
    return [worker.model_copy(update={"jobs": [job for job in worker.jobs if job in own]}) for worker in workers]


# Deletes a worker's entry only if it still holds what was read: a worker that came back and
# wrote a new heartbeat meanwhile keeps its entry.
_DELETE_IF_UNCHANGED = """
if redis.call('HGET', KEYS[1], ARGV[1]) == ARGV[2] then return redis.call('HDEL', KEYS[1], ARGV[1]) end
return 0
"""


def forget_long_lost(client: redis.Redis, key: str, after_seconds: float) -> int:
    """Drop the heartbeat entries of workers silent for `after_seconds` (hosts retired or renamed
    would else be listed as lost for ever); returns how many."""
    now, forgotten = time.time(), 0
    for hostname, raw in client.hgetall(key).items():
        try:
            worker = WorkerStatus.model_validate_json(raw)
        except ValueError:
            continue  # read_workers skips it with a log line
        if worker.is_lost(now, after_seconds):
            forgotten += int(client.eval(_DELETE_IF_UNCHANGED, 1, key, hostname, raw))
    return forgotten
