"""The rules about jobs: submit, read, list. Route handlers call these and nothing else."""

from __future__ import annotations

import base64
import json
import secrets
from datetime import datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from service.auth import Principal
from service.db import on_commit
from service.dispatch import Dispatcher
from service.timeline import document, state_changed
from service.errors import Conflict, InvalidRequest, NotFound
from service.repositories import checkpoints, dispatch_intents, jobs
from service.tables import JobRow, utcnow
from trainjobs.contract.events import TERMINAL_STATES
from trainjobs.contract.job import JobPage
from trainjobs.contract.spec import JobSpec


def new_job_id() -> str:
    return "j" + secrets.token_hex(8)


def submit(session: Session, principal: Principal, spec: JobSpec, dispatcher: Dispatcher,
           idempotency_key: str | None = None) -> tuple[JobRow, bool]:
    """Store the job and its dispatch intent in the caller's transaction; the Celery message
    goes out once that transaction has committed (service.dispatch explains the outbox).

    Returns (job, created). A repeat of an Idempotency-Key by the same owner returns the first
    job: the unique constraint decides between concurrent duplicates, not a read before write.
    """
    if idempotency_key is not None:
        existing = jobs.get_by_idempotency_key(session, principal.owner, idempotency_key)
        if existing is not None:
            return existing, False
    for field in ("resume_from", "init_from"):
        _check_checkpoint_visible(session, principal, field, getattr(spec, field))
    now = utcnow()
    job = JobRow(
        id=new_job_id(), owner=principal.owner, name=spec.name, state="queued", stop_reason=None,
        spec=spec.model_dump(mode="json"), device=spec.device, world_size=spec.world_size,
        epoch=0, metrics=None, error=None, waiting_reason=None, worker=None, attempt=1,
        idempotency_key=idempotency_key, created_at=now, started_at=None, finished_at=None,
        updated_at=now,
    )
    try:
        with session.begin_nested():
            jobs.add(session, job)
            dispatch_intents.add(session, job.id, job.device)
    except IntegrityError:
        if idempotency_key is None:
            raise
        existing = jobs.get_by_idempotency_key(session, principal.owner, idempotency_key)
        if existing is None:
            raise
        return existing, False
    state_changed(session, job)
    on_commit(session, lambda: dispatcher.send_committed(job.id, job.device))
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
    """A queued job is cancelled at once (a worker's claim needs it queued, so it never starts).
    A running one becomes "cancelling": its worker ends every rank and reports "cancelled"."""
    job = get_visible(session, principal, job_id)
    job = jobs.get(session, job.id, for_update=True)
    if job.state in TERMINAL_STATES:
        raise Conflict(f"job {job_id} is already {job.state}")
    if job.state == "queued":
        jobs.touch(job, state="cancelled", stop_reason="cancelled", finished_at=utcnow(), waiting_reason=None)
        dispatch_intents.remove(session, job.id)
    elif job.state == "running":
        jobs.touch(job, state="cancelling")
    state_changed(session, job)
    return job


def parse_last_event_id(value: str | None) -> int:
    if value is None or value == "":
        return 0
    if not value.isdigit():
        raise InvalidRequest("Last-Event-ID", "must be an event id this API sent", location="header")
    return int(value)


def list_page(session: Session, principal: Principal, *, state: str | None, limit: int,
              cursor: str | None) -> JobPage:
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
