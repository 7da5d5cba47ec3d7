"""The rules about jobs: submit, read, list. Route handlers call these and nothing else."""

from __future__ import annotations

import base64
import json
from datetime import datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from trainjobs.contract.job import JobPage
from trainjobs.contract.spec import JobSpec
from trainjobs.service import lifecycle
from trainjobs.service.auth import Principal
from trainjobs.service.db import on_commit
from trainjobs.service.dispatch import Dispatcher
from trainjobs.service.errors import InvalidRequest, NotFound
from trainjobs.service.repositories import checkpoints, jobs
from trainjobs.service.tables import JobRow
from trainjobs.service.timeline import document


def submit(
    session: Session, principal: Principal, spec: JobSpec, dispatcher: Dispatcher, idempotency_key: str | None = None
) -> tuple[JobRow, bool]:
    """Store the job and its dispatch intent in the caller's transaction; the Celery message
    goes out once that transaction has committed (trainjobs.service.dispatch explains the outbox).

    Returns (job, created). A repeat of an Idempotency-Key by the same owner returns the first
    job: the unique constraint decides between concurrent duplicates, not a read before write.
    """
    if idempotency_key is not None:
        existing = jobs.get_by_idempotency_key(session, principal.owner, idempotency_key)
        if existing is not None:
            return existing, False
    for field in ("resume_from", "init_from"):
        _check_checkpoint_visible(session, principal, field, getattr(spec, field))
    try:
        with session.begin_nested():
            job = lifecycle.submit(session, principal.owner, spec, idempotency_key)
    except IntegrityError:
        if idempotency_key is None:
            raise
        existing = jobs.get_by_idempotency_key(session, principal.owner, idempotency_key)
        if existing is None:
            raise
        return existing, False
    job_id, device = job.id, job.device
    on_commit(session, lambda: dispatcher.send_committed(job_id, device))
    return job, True


def _check_checkpoint_visible(session: Session, principal: Principal, field: str, checkpoint_id: str | None) -> None:
    if checkpoint_id is None:
        return
    row = checkpoints.get(session, checkpoint_id)
    owner_job = jobs.get(session, row.job_id) if row else None
    if owner_job is None or not principal.can_see(owner_job.owner):
        raise InvalidRequest(field, f"no checkpoint {checkpoint_id!r} that you can read")


def get_visible(session: Session, principal: Principal, job_id: str) -> JobRow:
    job = jobs.get(session, job_id)
    if job is None or not principal.can_see(job.owner):
        raise NotFound(f"job {job_id} not found")
    return job


def cancel(session: Session, principal: Principal, job_id: str) -> JobRow:
    job = get_visible(session, principal, job_id)
    locked = jobs.get(session, job.id, for_update=True)
    assert locked is not None  # visible a moment ago, in this transaction
    lifecycle.cancel(session, locked)
    return locked


def parse_last_event_id(value: str | None) -> int:
    if value is None or value == "":
        return 0
    # ASCII digits only ("²".isdigit() is true), and few enough to be an id this API sent.
    if not (value.isascii() and value.isdigit() and len(value) <= 18):
        raise InvalidRequest("Last-Event-ID", "must be an event id this API sent", location="header")
    return int(value)


def list_page(session: Session, principal: Principal, *, state: str | None, limit: int, cursor: str | None) -> JobPage:
    after = _decode_cursor(cursor) if cursor else None
    owner = None if principal.is_admin else principal.owner
    rows = jobs.page(session, owner=owner, state=state, limit=limit + 1, after=after)
    next_cursor = _encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return JobPage(items=[document(row) for row in rows[:limit]], next_cursor=next_cursor)


def _encode_cursor(job: JobRow) -> str:
    raw = json.dumps([job.created_at.isoformat(), job.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, job_id = json.loads(raw)
        when = datetime.fromisoformat(created_at)
        if when.tzinfo is None or not isinstance(job_id, str):
            raise ValueError
        return when, job_id
    except (ValueError, TypeError, json.JSONDecodeError):
        raise InvalidRequest("cursor", "not a cursor this API returned", location="query") from None
