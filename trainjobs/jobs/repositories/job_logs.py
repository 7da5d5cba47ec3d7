"""The job_log_lines table: each job's rank output, numbered per (attempt, rank), capped per job."""

from __future__ import annotations

from collections import deque

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from trainjobs.contract.events import LogLines
from trainjobs.jobs.repositories.idempotent_writes import insert_ignore
from trainjobs.jobs.tables import JobLogLineRow

NUL_SHOWN_AS = "\N{SYMBOL FOR NULL}"  # ␀
CAP_NOTICE = "[trainjobs] this job's log reached {cap} lines; later lines stay on the worker (rank*.log)"


def append(session: Session, job_id: str, attempt: int, batch: LogLines, cap: int) -> int:
    """Keep a batch (a line already kept is kept once); past `cap` lines for the job, keep one
    notice in their place and drop the rest. Returns how many lines were kept."""
    stored = count(session, job_id)
    if stored > cap:
        return 0
    kept = 0
    for offset, text in enumerate(batch.lines):
        if stored + kept >= cap:
            text = CAP_NOTICE.format(cap=cap)  # the cap's one notice: line cap + 1
        # PostgreSQL's text holds no NUL: one such byte in a rank's output lost the whole batch.
        text = text.replace("\x00", NUL_SHOWN_AS)
        row = {
            "job_id": job_id,
            "attempt": attempt,
            "rank": batch.rank,
            "line_no": batch.first_line + offset,
            "text": text,
        }
        kept += insert_ignore(session, JobLogLineRow.__table__, row)
        if stored + kept > cap:
            break
    return kept


def count(session: Session, job_id: str) -> int:
    return int(session.scalar(select(func.count()).where(JobLogLineRow.job_id == job_id)) or 0)


def attempt_text(
    session: Session, job_id: str, attempt: int, tail: int | None, up_to_id: int | None = None
) -> list[str]:
    """Every rank's lines of one attempt (that arrived up to `up_to_id`), "[rank N] " before
    each, rank by rank; with `tail`, the last `tail` lines of each rank."""
    query = select(JobLogLineRow.rank, JobLogLineRow.text).where(
        JobLogLineRow.job_id == job_id, JobLogLineRow.attempt == attempt
    )
    if up_to_id is not None:
        query = query.where(JobLogLineRow.id <= up_to_id)
    rows = session.execute(query.order_by(JobLogLineRow.rank, JobLogLineRow.line_no))
    by_rank: dict[int, deque[str]] = {}
    for rank, text in rows:
        by_rank.setdefault(rank, deque(maxlen=tail)).append(f"[rank {rank}] {text}")
    return [line for rank in sorted(by_rank) for line in by_rank[rank]]


def arrived_after(
    session: Session, job_id: str, attempt: int, after_id: int, limit: int = 1000
) -> list[tuple[int, str]]:
    """(id, "[rank N] text") of the attempt's lines that arrived after `after_id`, in arrival order."""
    rows = session.execute(
        select(JobLogLineRow.id, JobLogLineRow.rank, JobLogLineRow.text)
        .where(JobLogLineRow.job_id == job_id, JobLogLineRow.attempt == attempt, JobLogLineRow.id > after_id)
        .order_by(JobLogLineRow.id)
        .limit(limit)
    )
    return [(row_id, f"[rank {rank}] {text}") for row_id, rank, text in rows]


def last_id(session: Session, job_id: str) -> int:
    return int(session.scalar(select(func.max(JobLogLineRow.id)).where(JobLogLineRow.job_id == job_id)) or 0)
