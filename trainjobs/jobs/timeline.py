"""A job's document, and the events that say what happened to it (the SSE stream's source).

Every change of a job's state or waiting reason appends a "state" event carrying the job
document; each epoch's metrics and each checkpoint append theirs. Callers hold the job row
locked, which numbers the events in commit order.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy.orm import Session

from trainjobs.contract.job import Effective, JobDocument
from trainjobs.contract.spec import global_batch_size, scaled_lr
from trainjobs.jobs.repositories import job_events
from trainjobs.jobs.tables import JobRow


def document(job: JobRow) -> JobDocument:
    spec = job.spec
    gpus, accumulation = spec["gpus"], spec["accumulation_steps"]
    return JobDocument(
        id=job.id,
        name=job.name,
        owner=job.owner,
        state=job.state,
        stop_reason=job.stop_reason,
        spec=spec,
        effective=Effective(
            world_size=job.world_size,
            global_batch_size=global_batch_size(spec["batch_size"], gpus, accumulation),
            lr=scaled_lr(spec["optimizer"]["lr"], spec["lr_scaling"], gpus * accumulation),
        ),
        epoch=job.epoch,
        metrics=job.metrics,
        error=job.error,
        waiting_reason=job.waiting_reason,
        worker=job.worker,
        workers=job.workers or [],
        progress=job.progress,
        attempt=job.attempt,
        preemptions=job.preemptions or 0,
        created_at=job.created_at,
        started_at=job.started_at,
        finished_at=job.finished_at,
    )


def state_changed(session: Session, job: JobRow) -> None:
    session.flush()
    job_events.append(session, job, "state", document(job).model_dump(mode="json"))


def metrics_recorded(session: Session, job: JobRow, metrics: dict[str, Any]) -> None:
    job_events.append(session, job, "metrics", metrics)


def progress_recorded(session: Session, job: JobRow, progress: dict[str, Any]) -> None:
    job_events.append(session, job, "progress", progress)


def checkpoint_recorded(session: Session, job: JobRow, checkpoint: dict[str, Any]) -> None:
    job_events.append(session, job, "checkpoint", checkpoint)
