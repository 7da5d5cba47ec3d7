"""/v1/jobs/{id}/metrics: one row per finished epoch, ascending."""

from __future__ import annotations

from fastapi import APIRouter, Request

from trainjobs.contract.job import MetricsList
from trainjobs.jobs.repositories import epoch_metrics
from trainjobs.service import jobs
from trainjobs.service.api.deps import bearer_scheme, unit_of_work
from trainjobs.service.api.error_docs import errors

router = APIRouter(
    prefix="/v1/jobs/{job_id}/metrics", tags=["metrics"], responses=errors(401, 404), dependencies=bearer_scheme
)


@router.get("", response_model=MetricsList)
def list_metrics(job_id: str, request: Request) -> MetricsList:
    with unit_of_work(request) as work:
        job = jobs.get_visible(work.session, work.caller, job_id)
        return MetricsList(items=[row.data for row in epoch_metrics.for_job(work.session, job.id)])
