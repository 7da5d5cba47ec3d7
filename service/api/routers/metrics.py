"""/v1/jobs/{id}/metrics: one row per finished epoch, ascending."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel

from service import jobs
from service.api.deps import Caller, DbSession
from service.api.error_docs import errors
from service.repositories import epoch_metrics
from trainjobs.contract.events import EpochMetrics

router = APIRouter(prefix="/v1/jobs/{job_id}/metrics", tags=["metrics"], responses=errors(401, 404))


class MetricsList(BaseModel):
    items: list[EpochMetrics]


@router.get("", response_model=MetricsList)
def list_metrics(job_id: str, session: DbSession, caller: Caller) -> MetricsList:
    job = jobs.get_visible(session, caller, job_id)
    return MetricsList(items=[row.data for row in epoch_metrics.for_job(session, job.id)])
