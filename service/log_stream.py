"""A job's logs as the API serves them, from what the workers shipped (job_log_lines): one
attempt's text, or a stream that follows it until the job ends."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from trainjobs.contract.states import TERMINAL_STATES
from trainjobs.jobs.repositories import job_logs, jobs

POLL_SECONDS = 0.5


def as_text(lines: list[str]) -> str:
    return "\n".join(lines) + ("\n" if lines else "")


def attempt_text(session: Session, job_id: str, attempt: int, tail: int | None) -> str:
    return as_text(job_logs.attempt_text(session, job_id, attempt, tail))


def _start(sessions: sessionmaker[Session], job_id: str, attempt: int, tail: int | None) -> tuple[str, int]:
    with sessions() as session:
        seen = job_logs.last_id(session, job_id)
        return as_text(job_logs.attempt_text(session, job_id, attempt, tail, up_to_id=seen)), seen


def _next(sessions: sessionmaker[Session], job_id: str, attempt: int, after: int) -> tuple[list[tuple[int, str]], bool]:
    """New lines, and whether the attempt is over (the job ended, or moved on to a later attempt)."""
    with sessions() as session:
        job = jobs.get(session, job_id)
        over = job is None or job.state in TERMINAL_STATES or job.attempt != attempt
        # Read after the state: a line shipped before the final state is never missed.
        return job_logs.arrived_after(session, job_id, attempt, after), over


async def follow(sessions: sessionmaker[Session], job_id: str, attempt: int, tail: int | None) -> AsyncIterator[str]:
    """What is there (the last `tail` lines of each rank, if given), then each new line within
    about POLL_SECONDS of its arrival, until the attempt is over."""
    text, after = await run_in_threadpool(_start, sessions, job_id, attempt, tail)
    if text:
        yield text
    while True:
        rows, over = await run_in_threadpool(_next, sessions, job_id, attempt, after)
        if rows:
            after = rows[-1][0]
            yield as_text([line for _id, line in rows])
        elif over:
            return
        else:
            await asyncio.sleep(POLL_SECONDS)
