"""The API leader's part in sharing the fleet, each sweep, for each device type: the sharing rule's
decision (trainjobs.jobs.queue); each preemption it makes, recorded as a transition (running ->
preempting) whose notice reaches the victim's worker at once; each preempted job whose checkpoint
is later than `TRAINJOBS_PREEMPT_GRACE_SECONDS`, sent back to the queue (its worker ends its
processes, and it resumes from its last checkpoint); and the waiting reasons that changed.

Only the leader preempts: one decision at a time, so two API processes never choose victims for
the same job. A preemption re-reads its victim under its row lock and is skipped if the victim
has moved on (ended, cancelled, preempted already); the next sweep decides again from there.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.clock import utcnow
from trainjobs.contract.sharing import QueueEntry, QueueOwner, QueueView
from trainjobs.contract.workers import WorkerStatus
from trainjobs.jobs import lifecycle, queue
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import jobs
from trainjobs.jobs.sharing import Decision, Rules
from trainjobs.service.auth import Principal
from trainjobs.settings import Settings

log = logging.getLogger(__name__)

DEVICES = ("cuda", "cpu")
REASONS_BATCH = 500  # the most waiting reasons one sweep writes


def rules_of(settings: Settings) -> Rules:
    return Rules(
        now=time.time(), min_runtime_seconds=settings.preempt_min_runtime_seconds, preemption=settings.preemption
    )


def share_fleet(sessions: sessionmaker[Session], workers: list[WorkerStatus], settings: Settings) -> None:
    end_late_preemptions(sessions, settings.preempt_grace_seconds)
    for device in DEVICES:
        with transaction(sessions) as session:
            decided = queue.decision(session, device, workers, rules_of(settings))
        preempt(sessions, decided)
        explain(sessions, decided)


def preempt(sessions: sessionmaker[Session], decided: Decision) -> None:
    for preemption in decided.preemptions:
        with transaction(sessions) as session:
            victim = jobs.get(session, preemption.victim, for_update=True)
            if victim is None or victim.state != "running":
                continue
            lifecycle.preempt(session, victim, preemption.for_job)
        log.info("job %s is preempted for job %s", preemption.victim, preemption.for_job)


def end_late_preemptions(sessions: sessionmaker[Session], grace_seconds: float) -> None:
    with transaction(sessions) as session:
        for job in jobs.preempting_since_before(session, utcnow() - timedelta(seconds=grace_seconds)):
            why = (
                f"no checkpoint came within TRAINJOBS_PREEMPT_GRACE_SECONDS ({grace_seconds:.0f} s); "
                "it resumes from its last checkpoint"
            )
            lifecycle.preempted(session, job, why)
            log.warning("job %s: %s", job.id, why)


def explain(sessions: sessionmaker[Session], decided: Decision, limit: int = REASONS_BATCH) -> int:
    """Write the waiting reasons that changed (none for a job that starts now: it is dispatched
    again, in case its message went to a worker that could not take it); how many were written."""
    wanted = {job_id: decided.reasons.get(job_id) for job_id in decided.order}
    with transaction(sessions) as session:
        stale = [job_id for job_id, said in jobs.waiting_reasons(session, list(wanted)) if said != wanted[job_id]]
    changed = 0
    for job_id in stale[:limit]:
        with transaction(sessions) as session:
            job = jobs.get(session, job_id, for_update=True)
            if job is not None and job.state == "queued":
                changed += lifecycle.explain_waiting(session, job, wanted[job_id])
    return changed


def queue_view(
    session: Session, principal: Principal, device: str, workers: list[WorkerStatus], settings: Settings
) -> QueueView:
    """The queued jobs of `device` in start order, each with why it waits, and each owner's share
    (GET /v1/queue): the same decision the leader and the workers make. Another owner's job is
    shown without its id to a non-admin."""
    decided = queue.decision(session, device, workers, rules_of(settings))
    found = {row[0]: row for row in jobs.queued_of(session, device)}
    items = []
    for job_id in decided.order:
        row = found.get(job_id)
        if row is None:
            continue
        _, owner, gpus, _nodes, priority, *_ = row
        items.append(
            QueueEntry(
                job=job_id if principal.can_see(owner) else None,
                owner=owner,
                priority=priority,
                devices=gpus,
                reason=decided.reasons.get(job_id),
            )
        )
    owners = [
        QueueOwner(owner=v.owner, weight=v.weight, share=v.share, in_use=v.in_use, max_devices=v.max_devices)
        for v in decided.owners
    ]
    return QueueView(items=items, owners=owners)
