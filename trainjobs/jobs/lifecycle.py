"""A job's life: every write to a job's row happens here, through a named transition.

Each transition checks the state it starts from and refuses one the state machine does not allow
(`TransitionRefused`, which the API answers with 409), sets the fields, appends the timeline
event, and has the change published once the caller's transaction commits (the job cache that
polls read, and the notice that wakes the job's worker: `job_cache.publish_after_commit`), all in
the caller's transaction. Callers pass a row they hold locked
(`jobs.get(..., for_update=True)`), except `claim` and `renew`, which are one conditional UPDATE
each so that two workers racing for a job cannot both win.

The table in docs/design.md ("A job's life") lists the transitions; a test checks it against
`TRANSITIONS`.

    submit ─> queued ─claim─> running ─finish─> succeeded | failed | cancelled
                │  ^ ^          │ │ │
          cancel│  │ └─requeue──┘ │ └─cancel─> cancelling ─finish─> cancelled
                v  │              preempt
            cancelled              v
                   └──preempted── preempting (rank 0 checkpoints at its next step)

    queued ─refuse─> failed (the worker the rule chose cannot build the spec; before any claim)
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy.orm import Session

from trainjobs.contract.checkpoints import checkpoint_path, is_checkpoint_of
from trainjobs.contract.clock import utcnow
from trainjobs.contract.events import CheckpointRecord, EpochMetrics, Progress, StateChange
from trainjobs.contract.spec import JobSpec
from trainjobs.contract.states import ACTIVE_STATES, TERMINAL_STATES
from trainjobs.jobs import attempt_fence, job_cache, timeline
from trainjobs.jobs.errors import Conflict
from trainjobs.jobs.repositories import checkpoints, dispatch_intents, epoch_metrics, job_labels, job_nodes, jobs
from trainjobs.jobs.tables import JobRow


@dataclass(frozen=True)
class Transition:
    name: str
    from_states: frozenset[str]  # empty: the job is created by it
    to_states: frozenset[str]
    caller: str


def _in(*states: str) -> frozenset[str]:
    return frozenset(states)


TRANSITIONS = {
    t.name: t
    for t in (
        Transition("submit", _in(), _in("queued"), "API (POST /v1/jobs)"),
        Transition("claim", _in("queued"), _in("running"), "worker"),
        Transition("join", _in("queued"), _in("queued", "running"), "worker (a node of a multi-node job)"),
        Transition("leave", _in("queued"), _in("queued"), "worker (its nodes did not gather in time)"),
        Transition("renew", ACTIVE_STATES, ACTIVE_STATES, "worker"),
        Transition("cancel", _in("queued") | ACTIVE_STATES, _in("cancelled", "cancelling"), "API (POST .../cancel)"),
        Transition("finish", ACTIVE_STATES, TERMINAL_STATES, "collector (the launcher's or worker's report); reaper"),
        Transition("requeue", _in("running"), _in("queued"), "reaper (a lease ran out); collector (a node lost)"),
        Transition("explain_waiting", _in("queued"), _in("queued"), "reaper's sweep; worker"),
        Transition("refuse", _in("queued"), _in("failed"), "worker (its catalog cannot build the spec)"),
        Transition("preempt", _in("running"), _in("preempting"), "API leader (the sharing rule)"),
        Transition("preempted", _in("preempting"), _in("queued"), "collector (checkpoint recorded); leader; reaper"),
        Transition("delete", TERMINAL_STATES, _in(), "API (DELETE /v1/jobs/{id}); retention sweep"),
    )
}


class TransitionRefused(Conflict):
    """The job is not in a state the transition starts from (or the report is stale)."""


class ForeignRecord(ValueError):
    """An event about a checkpoint that is not its job's own: its id or path names another job."""


def _check(job: JobRow, transition: str) -> None:
    if job.state not in TRANSITIONS[transition].from_states:
        if job.state in TERMINAL_STATES:
            raise TransitionRefused(f"job {job.id} is already {job.state}")
        raise TransitionRefused(f"job {job.id} is {job.state}: cannot {transition} it")


def _set(job: JobRow, **changes: object) -> None:
    for column, value in changes.items():
        setattr(job, column, value)
    job.updated_at = utcnow()


def _running_on(workers: list[str], lease_seconds: float) -> dict[str, object]:
    """What queued -> running sets (claim, and join's last node): the workers of its nodes, node
    0's first, which holds the job's lease and is the job's `worker`."""
    now = utcnow()
    return {
        "state": "running",
        "worker": workers[0],
        "workers": workers,
        "lease_owner": workers[0],
        "lease_expires_at": now + timedelta(seconds=lease_seconds),
        "started_at": now,
        "waiting_reason": None,
        "preempted_by": None,
        "updated_at": now,
    }


def _state_changed(session: Session, job: JobRow, new: bool = False) -> None:
    session.flush()
    timeline.state_changed(session, job)
    job_cache.publish_after_commit(session, job, new)


# ---- transitions ---------------------------------------------------------------------------------


def submit(session: Session, owner: str, spec: JobSpec, idempotency_key: str | None) -> JobRow:
    """A new queued job with its dispatch intent (the outbox: service.dispatch)."""
    now = utcnow()
    job = JobRow(
        id="j" + secrets.token_hex(8),
        owner=owner,
        name=spec.name,
        state="queued",
        stop_reason=None,
        spec=spec.model_dump(mode="json"),
        device=spec.device,
        world_size=spec.world_size,
        epoch=0,
        metrics=None,
        error=None,
        waiting_reason=None,
        worker=None,
        attempt=1,
        priority=spec.priority,
        preemptible=spec.preemptible,
        preemptions=0,
        queued_at=now,
        idempotency_key=idempotency_key,
        created_at=now,
        started_at=None,
        finished_at=None,
        updated_at=now,
    )
    jobs.add(session, job)
    job_labels.add(session, job, spec.labels)
    dispatch_intents.add(session, job.id, job.device)
    _state_changed(session, job, new=True)
    return job


def delete(session: Session, job: JobRow) -> None:
    """A terminal job, gone with everything SQL holds of it (its checkpoint files are the
    caller's to remove once this commits). No event: nobody is left to read the stream."""
    _check(job, "delete")
    job_cache.mark_deleted(session, job)
    jobs.remove(session, job)


def claim(session: Session, job_id: str, worker: str, lease_seconds: float) -> JobRow | None:
    """queued -> running for `worker`, with a lease it must renew; None when the job is not
    queued (another worker won the race, or it was cancelled)."""
    job = jobs.claim(session, job_id, _running_on([worker], lease_seconds))
    if job is not None:
        _state_changed(session, job)
    return job


def join(session: Session, job: JobRow, worker: str, address: str, lease_seconds: float) -> int:
    """A worker takes a node of a queued multi-node job (its devices are leased meanwhile) and
    gets its node rank; the worker that takes the last node starts the job: queued -> running,
    with node 0's worker as the job's worker and lease holder. Members whose lease ran out (a
    worker that gave up or died while waiting) are dropped first."""
    _check(job, "join")
    now = utcnow()
    job_nodes.remove(session, job.id, job.attempt, expired_before=now)
    members = job_nodes.of_attempt(session, job.id, job.attempt)
    mine = next((member.node_rank for member in members if member.worker == worker), None)
    if mine is None:
        taken = {member.node_rank for member in members}
        mine = min(rank for rank in range(job.spec["nodes"] + 1) if rank not in taken)
        job_nodes.add(session, job.id, job.attempt, mine, worker, address, lease_seconds)
        members = job_nodes.of_attempt(session, job.id, job.attempt)
    if len(members) == job.spec["nodes"]:
        _set(job, **_running_on([member.worker for member in members], lease_seconds))
        _state_changed(session, job)
    return mine


def leave(session: Session, job: JobRow, worker: str) -> None:
    """A worker gives its node of a queued job back (the job did not gather its nodes in time)."""
    _check(job, "leave")
    job_nodes.remove(session, job.id, job.attempt, worker=worker)


def renew(
    session: Session, job_id: str, worker: str, attempt: int, lease_seconds: float, multi_node: bool = False
) -> bool:
    """Extend `worker`'s lease on a running job (and, for a multi-node job, on its node); False
    when it holds neither any more."""
    job_lease = jobs.renew_lease(session, job_id, worker, attempt, lease_seconds)
    node_lease = multi_node and job_nodes.renew(session, job_id, attempt, worker, lease_seconds)
    return job_lease or node_lease


def cancel(session: Session, job: JobRow) -> None:
    """A queued job is cancelled at once (a claim needs it queued, so it never starts); a running
    one becomes "cancelling" and its worker ends every rank and reports "cancelled". Cancelling
    a job that is already cancelling changes nothing."""
    _check(job, "cancel")
    if job.state == "cancelling":
        return
    if job.state == "queued":
        _set(job, state="cancelled", stop_reason="cancelled", finished_at=utcnow(), waiting_reason=None)
        dispatch_intents.remove(session, job.id)
    else:
        _set(job, state="cancelling")
    _state_changed(session, job)


def finish(session: Session, job: JobRow, attempt: int, outcome: StateChange) -> None:
    """running or cancelling -> a terminal state, as the attempt `attempt` reported it. A report
    from an older attempt (its worker was lost and the job moved on) is refused."""
    if outcome.state not in TERMINAL_STATES:
        raise TransitionRefused(f"job {job.id}: finish needs a terminal state, not {outcome.state}")
    if attempt != job.attempt:
        raise TransitionRefused(f"job {job.id} is at attempt {job.attempt}; a report of attempt {attempt} is stale")
    _check(job, "finish")
    job_nodes.remove(session, job.id, job.attempt)
    _set(
        job,
        state=outcome.state,
        stop_reason=outcome.stop_reason,
        error=outcome.error,
        finished_at=utcnow(),
        lease_owner=None,
        lease_expires_at=None,
        waiting_reason=None,
        progress=None,
    )
    _state_changed(session, job)


def refuse(session: Session, job: JobRow, error: str) -> None:
    """queued -> failed, before any claim: the worker the rule placed it on cannot build its spec
    (a model or dataset the API's catalog has is not installed there). Claimed, the job would
    fail to start, its message go back, and the job stay running until its lease ran out."""
    _check(job, "refuse")
    job_nodes.remove(session, job.id, job.attempt)  # a multi-node job's nodes taken so far
    _set(job, state="failed", stop_reason="error", error=error, finished_at=utcnow(), waiting_reason=None)
    dispatch_intents.remove(session, job.id)
    _state_changed(session, job)


def requeue_or_give_up(session: Session, job: JobRow, lost: str, max_attempts: int) -> None:
    """A worker or a node was lost: back to the queue, or failed after `max_attempts`."""
    if job.attempt >= max_attempts:
        plural = "s" if job.attempt > 1 else ""
        error = f"{lost}; gave up after {job.attempt} attempt{plural}"
        finish(session, job, job.attempt, StateChange(state="failed", stop_reason="error", error=error))
    else:
        requeue(session, job, f"requeued: {lost}")


def requeue(session: Session, job: JobRow, reason: str) -> None:
    """running -> queued with `attempt` + 1, dispatched again; the next worker resumes it from
    its last checkpoint, once the attempt it replaces is surely over (trainjobs.jobs.attempt_fence)."""
    _check(job, "requeue")
    fence = attempt_fence.fence(session, job)
    job_nodes.remove(session, job.id, job.attempt)
    _set(
        job,
        state="queued",
        attempt=job.attempt + 1,
        worker=None,
        lease_owner=None,
        lease_expires_at=fence,
        waiting_reason=reason,
        progress=None,
        queued_at=utcnow(),
    )
    dispatch_intents.add(session, job.id, job.device)
    _state_changed(session, job)


def preempt(session: Session, job: JobRow, for_job: str) -> None:
    """running -> preempting, to make room for `for_job`: its worker is told at once (the state
    notice), its rank 0 checkpoints at its next optimizer step and its ranks stop; it keeps its
    devices until then."""
    _check(job, "preempt")
    _set(job, state="preempting", preempting_for=for_job, preempting_since=utcnow())
    _state_changed(session, job)


def preempted(session: Session, job: JobRow, why: str, stopped: bool = False) -> None:
    """preempting -> queued with `attempt` + 1 and `preemptions` + 1 (which never count towards
    giving up), dispatched again: it resumes from its last checkpoint, which is the one taken
    for the preemption unless it was late (`why` says which). `stopped`: the attempt reported
    that its ranks stopped (its launcher does once they have exited: on one node, nothing of it
    is left); otherwise (the grace ran out, its worker was lost, other nodes) the next attempt
    waits until this one is surely over (trainjobs.jobs.attempt_fence)."""
    _check(job, "preempted")
    fence = None if stopped and job.spec.get("nodes", 1) == 1 else attempt_fence.fence(session, job)
    job_nodes.remove(session, job.id, job.attempt)
    taker = job.preempting_for
    _set(
        job,
        state="queued",
        attempt=job.attempt + 1,
        preemptions=job.preemptions + 1,
        preempted_by=taker,
        preempting_for=None,
        preempting_since=None,
        worker=None,
        lease_owner=None,
        lease_expires_at=fence,
        waiting_reason=f"preempted by job {taker}: {why}",
        progress=None,
        queued_at=utcnow(),
    )
    dispatch_intents.add(session, job.id, job.device)
    _state_changed(session, job)


def explain_waiting(session: Session, job: JobRow, reason: str | None) -> bool:
    """Say why a queued job waits (None: it no longer does); False when that is already said.

    A job that can run again gets a new dispatch intent: its message may have been dropped by a
    worker too small for it (a duplicate claims nothing)."""
    _check(job, "explain_waiting")
    if job.waiting_reason == reason:
        return False
    _set(job, waiting_reason=reason)
    if reason is None:
        dispatch_intents.add(session, job.id, job.device)
    _state_changed(session, job)
    return True


# ---- results: recorded in any state, they change no state ----------------------------------------


def record_epoch(session: Session, job: JobRow, attempt: int, metrics: EpochMetrics) -> bool:
    """Keep one epoch's metrics; False when that epoch is recorded already.

    Epochs finished by an earlier attempt are real results too: keyed by epoch, the first report
    wins, and an epoch re-run after a resume is not counted twice."""
    data = metrics.model_dump(mode="json")
    if not epoch_metrics.record(session, job.id, metrics.epoch, attempt, data):
        return False
    timeline.metrics_recorded(session, job, data)
    if metrics.epoch > job.epoch:
        _set(job, epoch=metrics.epoch, metrics=data)
    job_cache.publish_after_commit(session, job)
    return True


def record_progress(session: Session, job: JobRow, attempt: int, progress: Progress) -> None:
    """Rank 0's progress inside the epoch; kept while the attempt that sent it runs."""
    if attempt != job.attempt or job.state not in ACTIVE_STATES:
        return
    data = progress.model_dump(mode="json")
    _set(job, progress=data)
    timeline.progress_recorded(session, job, data)
    job_cache.publish_after_commit(session, job)


def record_checkpoint(session: Session, job: JobRow, attempt: int, record: CheckpointRecord) -> bool:
    """Rank 0 of attempt `attempt` wrote a checkpoint; False (nothing recorded) when the job has
    moved on to a later attempt: that one's checkpoints are the job's now. Its id and path must
    be the job's own (`<job>-e...`, its attempt's file under `<job>/`): whoever can write to the
    stream must not move a row between jobs or point it at another job's file."""
    if not is_checkpoint_of(record.id, job.id) or record.path != checkpoint_path(job.id, record.id, attempt):
        raise ForeignRecord(f"checkpoint {record.id!r} at {record.path!r} is not job {job.id}'s own")
    if attempt != job.attempt:
        return False
    checkpoints.record(session, job.id, record)
    if record.is_best:
        checkpoints.mark_best(session, job.id, record.id)
    timeline.checkpoint_recorded(session, job, {**record.model_dump(mode="json", exclude={"path"}), "job_id": job.id})
    job_cache.publish_after_commit(session, job)
    return True


def remove_checkpoint(session: Session, job: JobRow, attempt: int, checkpoint_id: str) -> bool:
    """Rank 0 of attempt `attempt` rotated a checkpoint out (of its own job: another job's row is
    never touched); False when the job has moved on to a later attempt, whose rows stay."""
    if attempt != job.attempt:
        return False
    checkpoints.remove(session, job.id, checkpoint_id)
    return True
