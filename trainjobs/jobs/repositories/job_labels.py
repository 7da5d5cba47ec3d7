"""The job_labels table: a job's labels, written once with the job (by the job-life module)."""

from __future__ import annotations

from sqlalchemy.orm import Session

from trainjobs.jobs.tables import JobLabelRow, JobRow


def add(session: Session, job: JobRow, labels: dict[str, str]) -> None:
    session.add_all(
        JobLabelRow(job_id=job.id, key=key, value=value, owner=job.owner, job_created_at=job.created_at)
        for key, value in labels.items()
    )
    session.flush()
