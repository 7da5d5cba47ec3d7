"""Server-sent events for one job, read from job_events: resumable with Last-Event-ID, ended
after the job's terminal state."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from trainjobs.contract.states import TERMINAL_STATES
from trainjobs.jobs.repositories import job_events, jobs

POLL_SECONDS = 0.5
KEEPALIVE_SECONDS = 15.0


def _read(sessions: sessionmaker[Session], job_id: str, after: int) -> tuple[list[tuple[int, str, dict]], bool]:
    with sessions() as session:
        rows = [(row.seq, row.kind, row.data) for row in job_events.after(session, job_id, after)]
        job = jobs.get(session, job_id)
        return rows, job is None or (job.state in TERMINAL_STATES and job.event_seq <= after + len(rows))


async def job_event_stream(sessions: sessionmaker[Session], job_id: str, after: int) -> AsyncIterator[str]:
    last_write = time.monotonic()
    while True:
        rows, ended = await run_in_threadpool(_read, sessions, job_id, after)
        for seq, kind, data in rows:
            yield f"id: {seq}\nevent: {kind}\ndata: {json.dumps(data)}\n\n"
            after = seq
            last_write = time.monotonic()
        if ended:
            return
        if not rows:
            if time.monotonic() - last_write > KEEPALIVE_SECONDS:
                yield ": keep-alive\n\n"
                last_write = time.monotonic()
            await asyncio.sleep(POLL_SECONDS)
