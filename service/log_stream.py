"""A job's logs as the API serves them, from what the workers shipped (job_log_lines): one
attempt's text, or a stream that follows it until the job ends. Every stream of one attempt in
this process is served by one reader (service.streams)."""

from __future__ import annotations

from collections.abc import AsyncIterator

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool

from trainjobs.contract.states import TERMINAL_STATES
from trainjobs.jobs.repositories import job_logs, jobs
from trainjobs.service.streams import Batch, Feeds


def as_text(lines: list[str]) -> str:
    return "\n".join(lines) + ("\n" if lines else "")


def attempt_text(session: Session, job_id: str, attempt: int, tail: int | None) -> str:
    return as_text(job_logs.attempt_text(session, job_id, attempt, tail))


def _start(sessions: sessionmaker[Session], job_id: str, attempt: int, tail: int | None) -> tuple[str, int]:
    with sessions() as session:
        seen = job_logs.last_id(session, job_id)
        return as_text(job_logs.attempt_text(session, job_id, attempt, tail, up_to_id=seen)), seen


def _next(sessions: sessionmaker[Session], job_id: str, attempt: int, after: int) -> Batch[str]:
    """New lines; over once the attempt is (the job ended, or moved on to a later attempt) and
    no line is left."""
    with sessions() as session:
        job = jobs.get(session, job_id)
        ended = job is None or job.state in TERMINAL_STATES or job.attempt != attempt
        # Read after the state: a line shipped before the final state is never missed.
        rows = job_logs.arrived_after(session, job_id, attempt, after)
        return Batch(rows, ended and not rows)


async def follow(
    sessions: sessionmaker[Session], feeds: Feeds, job_id: str, attempt: int, tail: int | None
) -> AsyncIterator[str]:
    """What is there (the last `tail` lines of each rank, if given), then each new line within
    about a poll of its arrival, until the attempt is over."""
    text, after = await run_in_threadpool(_start, sessions, job_id, attempt, tail)
    if text:
        yield text

    async def read(position: int) -> Batch[str]:
        return await run_in_threadpool(_next, sessions, job_id, attempt, position)

    async for lines in feeds.follow(("logs", job_id, attempt), read, after):
        if lines:
            yield as_text([line for _id, line in lines])
