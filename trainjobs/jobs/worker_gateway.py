"""What a worker reads from and writes to SQL, in one place.

A worker touches a job only through these functions: it reads the queue around a run message,
claims a job, keeps its lease (and learns of a cancel), and says why a job cannot run. Every
write is a job-life transition (trainjobs.jobs.lifecycle). What comes back is plain data,
never an ORM row, so the worker knows nothing of the tables.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from sqlalchemy.orm import Session

from trainjobs.contract.spec import devices_per_node
from trainjobs.contract.workers import WorkerStatus
from trainjobs.jobs import attempt_fence, lifecycle, queue
from trainjobs.jobs.repositories import checkpoints, job_nodes, jobs
from trainjobs.jobs.scheduling import QueuedJob
from trainjobs.jobs.sharing import Rules
from trainjobs.jobs.tables import JobRow


@dataclass(frozen=True)
class MessageView:
    """A run message's job as the worker finds it."""

    state: str | None  # None: no such job
    job: QueuedJob | None = None  # set while it is queued


@dataclass(frozen=True)
class ClaimedJob:
    id: str
    attempt: int
    spec: dict[str, Any]
    resume_path: str | None  # relative to the checkpoint store
    init_path: str | None
    missing_checkpoint: str | None = None  # why the job cannot start: it names a checkpoint that is gone
    node_rank: int = 0  # this worker's node of a multi-node job
    leader_address: str | None = None  # where node 0's worker said its ranks are reached (multi-node)


@dataclass(frozen=True)
class Gathering:
    """Where a multi-node job stands for one of its workers while it gathers its nodes."""

    state: str | None  # the job's state (None: gone)
    node_rank: int | None  # this worker's node; None when it holds none
    attempt: int = 0
    started: ClaimedJob | None = None  # set once every node is held and the job runs


@dataclass(frozen=True)
class LeaseCheck:
    state: str | None  # None: the job is gone
    same_attempt: bool  # the job is still at the attempt this worker runs
    ours: bool  # ... and this worker holds its lease


def _queued(job: JobRow) -> QueuedJob:
    nodes = job.spec.get("nodes", 1)
    needed = devices_per_node(job.spec["gpus"], nodes)
    return QueuedJob(id=job.id, device=job.device, needed=needed, nodes=nodes, own_code=bool(job.spec.get("code")))


def view_message(session: Session, job_id: str) -> MessageView:
    job = jobs.get(session, job_id)
    if job is None or job.state != "queued":
        return MessageView(state=job.state if job else None)
    return MessageView(state=job.state, job=_queued(job))


def next_start(
    session: Session, hostname: str, device: str, workers: Sequence[WorkerStatus], rules: Rules, free: int
) -> QueuedJob | None:
    """The job the sharing rule starts on this worker now (the first it places here), or None:
    the worker takes only what the rule places on it."""
    decided = queue.decision(session, device, workers, rules, explain=False, free_here=(hostname, free))
    start = next((start for start in decided.starts if hostname in start.hosts), None)
    if start is None:
        return None
    job = jobs.get(session, start.job)
    if job is None or job.state != "queued" or not attempt_fence.can_start_now(job):
        return None  # the worker hands the message back, and tries again in a moment
    return _queued(job)


def claim(session: Session, job_id: str, worker: str, lease_seconds: float) -> ClaimedJob | None:
    """Take a queued job (None: another worker won it, or it was cancelled) with what its run
    needs. A later attempt (the previous worker was lost) continues from the job's last
    checkpoint; a first one from the spec's `resume_from` or `init_from`."""
    job = lifecycle.claim(session, job_id, worker, lease_seconds)
    if job is None:
        return None
    return _with_checkpoints(session, job, node_rank=0)


def _with_checkpoints(session: Session, job: JobRow, node_rank: int) -> ClaimedJob:
    claimed = ClaimedJob(
        id=job.id, attempt=job.attempt, spec=job.spec, resume_path=None, init_path=None, node_rank=node_rank
    )
    latest = checkpoints.latest_for_job(session, job.id) if job.attempt > 1 else None
    if latest is not None:
        return replace(claimed, resume_path=latest.path)
    try:
        return replace(
            claimed,
            resume_path=_checkpoint_path(session, job.spec.get("resume_from")),
            init_path=_checkpoint_path(session, job.spec.get("init_from")),
        )
    except LookupError as missing:
        return replace(claimed, missing_checkpoint=str(missing))


def _checkpoint_path(session: Session, checkpoint_id: str | None) -> str | None:
    if checkpoint_id is None:
        return None
    row = checkpoints.get(session, checkpoint_id)
    if row is None:
        raise LookupError(f"checkpoint {checkpoint_id} no longer exists (rotated out or deleted)")
    return row.path


def join(session: Session, job_id: str, worker: str, address: str, lease_seconds: float) -> Gathering:
    """Take a node of a queued multi-node job (see lifecycle.join)."""
    job = jobs.get(session, job_id, for_update=True)
    if job is None or job.state != "queued":
        return Gathering(state=job.state if job else None, node_rank=None)
    node_rank = lifecycle.join(session, job, worker, address, lease_seconds)
    return _gathering(session, job, worker, node_rank)


def gathering(session: Session, job_id: str, attempt: int, worker: str, lease_seconds: float) -> Gathering:
    """Whether the job this worker holds a node of has gathered them all (and runs); the
    worker's hold is renewed meanwhile."""
    job = jobs.get(session, job_id, for_update=True)
    if job is None or job.attempt != attempt:
        return Gathering(state=job.state if job else None, node_rank=None)
    lifecycle.renew(session, job_id, worker, attempt, lease_seconds, multi_node=True)
    node_rank = next((m.node_rank for m in job_nodes.of_attempt(session, job_id, attempt) if m.worker == worker), None)
    return _gathering(session, job, worker, node_rank)


def _gathering(session: Session, job: JobRow, worker: str, node_rank: int | None) -> Gathering:
    if job.state == "running" and node_rank is not None:
        members = job_nodes.of_attempt(session, job.id, job.attempt)
        leader = next(member.address for member in members if member.node_rank == 0)
        started = replace(_with_checkpoints(session, job, node_rank), leader_address=leader)
        return Gathering(state=job.state, node_rank=node_rank, attempt=job.attempt, started=started)
    return Gathering(state=job.state, node_rank=node_rank, attempt=job.attempt)


def leave(session: Session, job_id: str, attempt: int, worker: str) -> None:
    job = jobs.get(session, job_id, for_update=True)
    if job is not None and job.state == "queued" and job.attempt == attempt:
        lifecycle.leave(session, job, worker)


def check_lease(session: Session, job_id: str, worker: str, attempt: int, renew_for: float | None) -> LeaseCheck:
    """Where the job this worker runs stands; with `renew_for`, extend the lease by that many
    seconds if it is still ours (the job's, or the node's of a multi-node job)."""
    job = jobs.get(session, job_id, for_update=True)
    if job is None:
        return LeaseCheck(state=None, same_attempt=False, ours=False)
    same_attempt = job.attempt == attempt
    # A one-node job's lease is the job row's alone: its watch (every second) reads no job_nodes.
    multi_node = job.spec.get("nodes", 1) > 1
    member = (
        multi_node and same_attempt and any(m.worker == worker for m in job_nodes.of_attempt(session, job_id, attempt))
    )
    ours = same_attempt and (job.lease_owner == worker or member)
    if ours and renew_for is not None:
        lifecycle.renew(session, job_id, worker, attempt, renew_for, multi_node)
    return LeaseCheck(state=job.state, same_attempt=same_attempt, ours=ours)


def queued_spec(session: Session, job_id: str) -> dict[str, Any] | None:
    """A queued job's stored spec (None: it is no longer queued)."""
    job = jobs.get(session, job_id)
    return job.spec if job is not None and job.state == "queued" else None


def refuse(session: Session, job_id: str, error: str) -> None:
    job = jobs.get(session, job_id, for_update=True)
    if job is not None and job.state == "queued":
        lifecycle.refuse(session, job, error)


def explain_waiting(session: Session, job_id: str, reason: str) -> None:
    job = jobs.get(session, job_id, for_update=True)
    if job is not None and job.state == "queued":
        lifecycle.explain_waiting(session, job, reason)
