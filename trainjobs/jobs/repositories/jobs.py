"""The jobs table. Its writes (add, claim, renew_lease) are called by
trainjobs.jobs.lifecycle only."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import CursorResult, and_, delete, exists, func, or_, select, update
from sqlalchemy.orm import Session, aliased

from trainjobs.contract.clock import utcnow
from trainjobs.contract.states import ACTIVE_STATES, TERMINAL_STATES
from trainjobs.jobs.tables import JobLabelRow, JobRow


def add(session: Session, job: JobRow) -> None:
    session.add(job)
    session.flush()


def get(session: Session, job_id: str, for_update: bool = False) -> JobRow | None:
    """`for_update` locks the row (PostgreSQL) so that state changes from the collector, the
    reaper and cancel never interleave on one job."""
    return session.get(JobRow, job_id, with_for_update=for_update, populate_existing=for_update)


def get_by_idempotency_key(session: Session, owner: str, key: str) -> JobRow | None:
    return session.scalars(select(JobRow).where(JobRow.owner == owner, JobRow.idempotency_key == key)).one_or_none()


@dataclass(frozen=True)
class JobFilter:
    """What `GET /v1/jobs` keeps. `labels`: (key, value) pairs, all required; a None value
    matches any value of the key."""

    owner: str | None = None
    states: tuple[str, ...] = ()
    labels: tuple[tuple[str, str | None], ...] = ()
    name: str | None = None


def page(session: Session, where: JobFilter, limit: int, after: tuple[datetime, str] | None) -> list[JobRow]:
    """Newest first, keyset-paginated on (created_at, id): no offset scans, and a job created
    while a client pages never shifts the pages it has not read yet.

    With labels, the rarest label's index drives the query (its rows carry the job's owner and
    creation time): the database walks it newest first and stops after `limit` matches; the
    other labels are primary-key probes. Without one, the jobs' own (owner, created_at, id) or
    (created_at, id) index does. A name is a substring, which no index serves: it filters the
    rows the index yields.
    """
    query = select(JobRow)
    created_at, job_id = JobRow.created_at, JobRow.id
    if where.labels:
        labels = _rarest_first(session, where.labels, where.owner)
        key, value = labels[0]
        driver = aliased(JobLabelRow)
        query = query.join(driver, driver.job_id == JobRow.id).where(driver.key == key)
        if value is not None:
            query = query.where(driver.value == value)
        if where.owner is not None:
            query = query.where(driver.owner == where.owner)
        created_at, job_id = driver.job_created_at, driver.job_id
        for key, value in labels[1:]:
            other = exists().where(JobLabelRow.job_id == JobRow.id, JobLabelRow.key == key)
            query = query.where(other.where(JobLabelRow.value == value) if value is not None else other)
    elif where.owner is not None:
        query = query.where(JobRow.owner == where.owner)
    if where.states:
        query = query.where(JobRow.state.in_(where.states))
    if where.name:
        query = query.where(JobRow.name.icontains(where.name, autoescape=True))
    if after is not None:
        after_created_at, after_id = after
        query = query.where(or_(created_at < after_created_at, and_(created_at == after_created_at, job_id < after_id)))
    query = query.order_by(created_at.desc(), job_id.desc()).limit(limit)
    return list(session.scalars(query))


LABEL_COUNT_CAP = 1000


def _rarest_first(
    session: Session, labels: tuple[tuple[str, str | None], ...], owner: str | None
) -> list[tuple[str, str | None]]:
    """The labels, the one with the fewest rows first (counted up to a cap: a short index range
    each), so that of `team=speech` (10% of jobs) and `sweep=43` (0.1%) the sweep drives: the
    query then walks 100 index entries for a page instead of thousands."""
    if len(labels) == 1:
        return list(labels)

    def capped_count(key: str, value: str | None) -> int:
        rows = select(JobLabelRow.job_id).where(JobLabelRow.key == key)
        if value is not None:
            rows = rows.where(JobLabelRow.value == value)
        if owner is not None:
            rows = rows.where(JobLabelRow.owner == owner)
        return session.scalar(select(func.count()).select_from(rows.limit(LABEL_COUNT_CAP).subquery())) or 0

    return sorted(labels, key=lambda label: capped_count(*label))


def remove(session: Session, job: JobRow) -> None:
    """Delete the job's row; its metrics, events, checkpoints' rows, logs, nodes and labels go
    with it (ON DELETE CASCADE; SQLite enforces it with foreign_keys=ON, see service.db)."""
    session.execute(delete(JobRow).where(JobRow.id == job.id).execution_options(synchronize_session=False))
    session.expunge(job)


def ended_before(session: Session, cutoff: datetime, limit: int) -> list[JobRow]:
    """Ended jobs that finished before `cutoff`, oldest first, locked (rows another transaction
    holds are left for the next pass). A job finishes after it was created, so the (state,
    created_at, id) index bounds the scan."""
    return list(
        session.scalars(
            select(JobRow)
            .where(
                JobRow.state.in_(TERMINAL_STATES),
                JobRow.created_at < cutoff,
                JobRow.finished_at < cutoff,
            )
            .order_by(JobRow.created_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    )


def queued_starting_from(session: Session, checkpoint_ids: list[str], limit: int = 10) -> list[JobRow]:
    """Queued jobs whose spec names one of `checkpoint_ids` as `resume_from` or `init_from`:
    they have not read it yet."""
    if not checkpoint_ids:
        return []
    return list(
        session.scalars(
            select(JobRow)
            .where(
                JobRow.state == "queued",
                or_(
                    JobRow.spec["resume_from"].as_string().in_(checkpoint_ids),
                    JobRow.spec["init_from"].as_string().in_(checkpoint_ids),
                ),
            )
            .limit(limit)
        )
    )


def claim(session: Session, job_id: str, running: dict[str, Any]) -> JobRow | None:
    """Atomically take a queued job: set the columns `running` names (lifecycle.claim's).

    One conditional UPDATE: of two workers that race for one job, exactly one matches it. A
    message for a job that is running, finished or unknown claims nothing, nor one for a job
    whose previous attempt may still live (trainjobs.jobs.attempt_fence: its lease, kept, is not over).
    """
    not_fenced = or_(JobRow.lease_expires_at.is_(None), JobRow.lease_expires_at <= utcnow())
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        update(JobRow)
        .where(JobRow.id == job_id, JobRow.state == "queued", not_fenced)
        .values(**running)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        return None
    return session.get(JobRow, job_id, populate_existing=True)  # still locked by the UPDATE


def renew_lease(session: Session, job_id: str, worker: str, attempt: int, lease_seconds: float) -> bool:
    """Extend our lease; False when it is no longer ours (requeued after it ran out, or ended)."""
    result: CursorResult[Any] = session.execute(  # type: ignore[assignment]
        update(JobRow)
        .where(
            JobRow.id == job_id,
            JobRow.lease_owner == worker,
            JobRow.attempt == attempt,
            JobRow.state.in_(ACTIVE_STATES),
        )
        .values(lease_expires_at=utcnow() + timedelta(seconds=lease_seconds))
        .execution_options(synchronize_session=False)
    )
    return result.rowcount == 1


def with_expired_lease(session: Session, now: datetime, limit: int = 100) -> list[JobRow]:
    return list(
        session.scalars(
            select(JobRow)
            .where(JobRow.state.in_(ACTIVE_STATES), JobRow.lease_expires_at < now)
            .order_by(JobRow.lease_expires_at)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    )


def _devices_needed():
    # DataParallel runs one rank but drives every GPU it asks for: what a job needs is `gpus`.
    return JobRow.spec["gpus"].as_integer()


def _nodes():
    # Specs stored before `nodes` existed span one node.
    return func.coalesce(JobRow.spec["nodes"].as_integer(), 1)


def _own_code():
    return JobRow.spec["code"].as_string().is_not(None)


def count_by_state(session: Session) -> dict[str, int]:
    rows = session.execute(select(JobRow.state, func.count()).group_by(JobRow.state))
    return {state: count for state, count in rows}


def owned_by(session: Session, owner: str, job_ids: set[str]) -> set[str]:
    """Which of `job_ids` belong to `owner`."""
    return set(session.scalars(select(JobRow.id).where(JobRow.owner == owner, JobRow.id.in_(job_ids))))


def running_figures(
    session: Session, limit: int = 1000
) -> list[tuple[str, dict[str, Any] | None, dict[str, Any] | None]]:
    """(id, last epoch's metrics, progress) of running jobs (the state index finds them)."""
    rows = session.execute(
        select(JobRow.id, JobRow.metrics, JobRow.progress).where(JobRow.state.in_(ACTIVE_STATES)).limit(limit)
    )
    return [(job_id, metrics, progress) for job_id, metrics, progress in rows]


def unfinished_using_code(session: Session, owner: str, code: str, limit: int = 10) -> list[JobRow]:
    """The owner's jobs that name `code` and have not ended (they will read the archive)."""
    return list(
        session.scalars(
            select(JobRow)
            .where(
                JobRow.owner == owner,
                JobRow.state.not_in(TERMINAL_STATES),
                JobRow.spec["code"].as_string() == code,
            )
            .limit(limit)
        )
    )


QUEUED_FIELDS = (JobRow.id, JobRow.owner, _devices_needed(), _nodes(), JobRow.priority, JobRow.queued_at,
                 JobRow.created_at, _own_code(), JobRow.preempted_by)  # fmt: skip
RUNNING_FIELDS = (JobRow.id, JobRow.owner, _devices_needed(), _nodes(), JobRow.workers, JobRow.priority,
                  JobRow.preemptible, JobRow.started_at, JobRow.preempting_for, JobRow.state)  # fmt: skip


def queued_of(session: Session, device: str) -> list[tuple]:
    """Every queued job of a device type, as the sharing rule reads it (plain rows: a long queue
    is read without building a row object per job), oldest first."""
    query = select(*QUEUED_FIELDS).where(JobRow.state == "queued", JobRow.device == device)
    return list(session.execute(query.order_by(JobRow.created_at, JobRow.id)))


def holding_devices(session: Session, device: str) -> list[tuple]:
    """The jobs of a device type that hold devices now (running, preempting, cancelling)."""
    query = select(*RUNNING_FIELDS).where(JobRow.state.in_(ACTIVE_STATES), JobRow.device == device)
    return list(session.execute(query))


def preempting_since_before(session: Session, cutoff: datetime, limit: int = 100) -> list[JobRow]:
    """Jobs preempting since before `cutoff` (their checkpoint is late), locked."""
    return list(
        session.scalars(
            select(JobRow)
            .where(JobRow.state == "preempting", JobRow.preempting_since < cutoff)
            .limit(limit)
            .with_for_update(skip_locked=True)
        )
    )


def waiting_reasons(session: Session, job_ids: list[str]) -> list[tuple[str, str | None]]:
    """(id, waiting reason) of those of `job_ids` still queued."""
    found: list[tuple[str, str | None]] = []
    for start in range(0, len(job_ids), 1000):  # bounded IN lists
        chunk = job_ids[start : start + 1000]
        query = select(JobRow.id, JobRow.waiting_reason).where(JobRow.id.in_(chunk), JobRow.state == "queued")
        found += [(job_id, reason) for job_id, reason in session.execute(query)]
    return found


def devices_in_use(session: Session) -> list[tuple[str, str, int]]:
    """(owner, device type, devices) held by jobs now."""
    held = func.sum(_devices_needed())
    query = select(JobRow.owner, JobRow.device, held).where(JobRow.state.in_(ACTIVE_STATES))
    return [
        (owner, device, int(count or 0))
        for owner, device, count in session.execute(query.group_by(JobRow.owner, JobRow.device))
    ]


def preemptions_so_far(session: Session) -> int:
    """Preemptions of the jobs SQL still holds."""
    return int(session.scalar(select(func.coalesce(func.sum(JobRow.preemptions), 0))) or 0)


def queue_entry_times(session: Session) -> list[tuple[str, datetime]]:
    """(device type, when it entered the queue) of every queued job."""
    entered = func.coalesce(JobRow.queued_at, JobRow.created_at)
    return list(session.execute(select(JobRow.device, entered).where(JobRow.state == "queued")))
