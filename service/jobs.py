"""The rules about jobs: submit, read, list. Route handlers call these and nothing else."""

from __future__ import annotations

import base64
import json
import logging
from datetime import datetime

from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from trainjobs.contract.job import JobPage
from trainjobs.contract.spec import LABEL_KEY, MAX_LABEL_VALUE, UNPRINTABLE, JobSpec
from trainjobs.contract.states import JOB_STATES
from trainjobs.jobs import lifecycle
from trainjobs.jobs.db import on_commit
from trainjobs.jobs.errors import Conflict, Forbidden, InvalidRequest, NotFound
from trainjobs.jobs.repositories import checkpoints, jobs
from trainjobs.jobs.repositories.jobs import JobFilter
from trainjobs.jobs.tables import JobRow
from trainjobs.jobs.timeline import document
from trainjobs.service import code_uploads, owners, store_deletions
from trainjobs.service.auth import Principal
from trainjobs.service.dispatch import Dispatcher
from trainjobs.store import CheckpointStore

log = logging.getLogger(__name__)


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
    code_uploads.check_usable(session, principal.owner, spec.code)
    owners.check_allowed(session, principal, spec)
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


def delete(session: Session, principal: Principal, job_id: str, store: CheckpointStore) -> None:
    """A terminal job and all it left: rows now, checkpoint files once that has committed (a
    failed commit must not leave a job whose files are gone).

    A queued job that names one of its checkpoints (`resume_from`, `init_from`) has not read it
    yet: the delete waits for it (409). A running one has, and continues; README ("Deleting") says
    what happens to it if it is taken up again before its own first checkpoint."""
    job = get_visible(session, principal, job_id)
    locked = jobs.get(session, job.id, for_update=True)
    assert locked is not None  # visible a moment ago, in this transaction
    waiting = queued_starting_from(session, job)
    if waiting:
        visible = next((other.id for other in waiting if principal.can_see(other.owner)), None)
        who = f"job {visible}" if visible else "a job of another owner"
        raise Conflict(f"{who} is queued to start from a checkpoint of job {job.id}: delete it once that has started")
    lifecycle.delete(session, locked)
    store_deletions.record(session, [job_id], tree=True)
    on_commit(session, lambda: store_deletions.delete_now(store, [job_id], tree=True))


def queued_starting_from(session: Session, job: JobRow) -> list[JobRow]:
    """Queued jobs that will start from one of `job`'s checkpoints (and have not read it yet)."""
    return jobs.queued_starting_from(session, [row.id for row in checkpoints.for_job(session, job.id)])


def parse_last_event_id(value: str | None) -> int:
    if value is None or value == "":
        return 0
    # ASCII digits only ("²".isdigit() is true), and few enough to be an id this API sent.
    if not (value.isascii() and value.isdigit() and len(value) <= 18):
        raise InvalidRequest("Last-Event-ID", "must be an event id this API sent", location="header")
    return int(value)


MAX_LABEL_FILTERS = 8


def list_page(
    session: Session,
    principal: Principal,
    *,
    states: str | None = None,
    labels: list[str] | None = None,
    name: str | None = None,
    owner: str | None = None,
    limit: int,
    cursor: str | None,
) -> JobPage:
    for field, value in (("name", name), ("owner", owner), *(("label", label) for label in labels or [])):
        # What no stored name, owner or label holds; PostgreSQL refuses a NUL in a query outright.
        if value is not None and UNPRINTABLE.search(value):
            raise InvalidRequest(field, "must not contain control or bidirectional-override characters", "query")
    where = JobFilter(
        owner=_owner_filter(principal, owner),
        states=_parse_states(states),
        labels=_parse_labels(labels or []),
        name=name or None,
    )
    after = _decode_cursor(cursor) if cursor else None
    rows = jobs.page(session, where, limit=limit + 1, after=after)
    next_cursor = _encode_cursor(rows[limit - 1]) if len(rows) > limit else None
    return JobPage(items=[document(row) for row in rows[:limit]], next_cursor=next_cursor)


def _owner_filter(principal: Principal, owner: str | None) -> str | None:
    if principal.is_admin:
        return owner
    if owner is not None and owner != principal.owner:
        raise Forbidden("owner: only an admin may list another owner's jobs")
    return principal.owner


def _parse_states(states: str | None) -> tuple[str, ...]:
    if states is None:
        return ()
    parsed = tuple(dict.fromkeys(part.strip() for part in states.split(",") if part.strip()))
    unknown = [state for state in parsed if state not in JOB_STATES]
    if unknown or not parsed:
        raise InvalidRequest(
            "state", f"{unknown[0] if unknown else states!r}: not one of {', '.join(JOB_STATES)}", "query"
        )
    return parsed


def _parse_labels(labels: list[str]) -> tuple[tuple[str, str | None], ...]:
    """`k=v` (the value may hold further '=') or `k` alone (any value)."""
    if len(labels) > MAX_LABEL_FILTERS:
        raise InvalidRequest("label", f"at most {MAX_LABEL_FILTERS} label filters", "query")
    parsed: dict[str, str | None] = {}
    for label in labels:
        key, has_value, value = label.partition("=")
        if not LABEL_KEY.fullmatch(key):
            raise InvalidRequest("label", f"{key!r} is not a label key (a-z 0-9 . _ / -, 1-63 characters)", "query")
        if len(value) > MAX_LABEL_VALUE:
            raise InvalidRequest("label", f"{key!r}: a value is at most {MAX_LABEL_VALUE} characters", "query")
        if key in parsed and parsed[key] != (value if has_value else None):
            raise InvalidRequest("label", f"{key!r} is asked for twice with different values", "query")
        parsed[key] = value if has_value else None
    return tuple(parsed.items())


def _encode_cursor(job: JobRow) -> str:
    raw = json.dumps([job.created_at.isoformat(), job.id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        created_at, job_id = json.loads(raw)
        when = datetime.fromisoformat(created_at)
        if when.tzinfo is None or not isinstance(job_id, str) or not job_id.isascii() or not job_id.isalnum():
            raise ValueError
        return when, job_id
    except (ValueError, TypeError, json.JSONDecodeError):
        raise InvalidRequest("cursor", "not a cursor this API returned", location="query") from None
