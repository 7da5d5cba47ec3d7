"""Server-sent events for one job, read from job_events: resumable with Last-Event-ID, ended
after the job's terminal state. Every stream of a job in this process is served by one reader
(service.streams)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from trainjobs.contract.states import TERMINAL_STATES
from trainjobs.jobs.repositories import job_events, jobs
from trainjobs.service.streams import Batch, Feeds

KEEPALIVE_SECONDS = 15.0


def _read(sessions: sessionmaker[Session], job_id: str, after: int) -> Batch[tuple[str, dict[str, Any]]]:
    """The job's events after `after`; over once the job has ended (or is gone) and none is left."""
    with sessions() as session:
        rows = [(row.seq, (row.kind, row.data)) for row in job_events.after(session, job_id, after)]
        job = jobs.get(session, job_id)
        over = job is None or (job.state in TERMINAL_STATES and job.event_seq <= after + len(rows))
        return Batch(rows, over)


async def job_event_stream(
    sessions: sessionmaker[Session], feeds: Feeds, job_id: str, after: int
) -> AsyncIterator[str]:
    async def read(position: int) -> Batch[tuple[str, dict[str, Any]]]:
        return await run_in_threadpool(_read, sessions, job_id, position)

    async for events in feeds.follow(("events", job_id), read, after, idle=KEEPALIVE_SECONDS):
        if events is None:
            yield ": keep-alive\n\n"
            continue
        for seq, (kind, data) in events:
            yield f"id: {seq}\nevent: {kind}\ndata: {json.dumps(data)}\n\n"
