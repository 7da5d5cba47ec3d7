"""/v1/jobs/{id}/metrics: one row per finished epoch, ascending; as JSON, or as CSV (a column per
figure, for a spreadsheet or pandas)."""

from __future__ import annotations

import csv
import io
from typing import Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from trainjobs.contract.figures import table_columns
from trainjobs.contract.job import MetricsList
from trainjobs.jobs.repositories import epoch_metrics
from trainjobs.service import jobs
from trainjobs.service.api.deps import bearer_scheme, unit_of_work
from trainjobs.service.api.error_docs import errors

router = APIRouter(
    prefix="/v1/jobs/{job_id}/metrics", tags=["metrics"], responses=errors(401, 404), dependencies=bearer_scheme
)


@router.get("", response_model=MetricsList, responses={200: {"content": {"text/csv": {}}}})
def list_metrics(
    job_id: str, request: Request, as_format: Literal["json", "csv"] = Query("json", alias="format")
) -> MetricsList | Response:
    with unit_of_work(request) as work:
        job = jobs.get_visible(work.session, work.caller, job_id)
        rows = [row.data for row in epoch_metrics.for_job(work.session, job.id)]
    if as_format == "csv":
        return Response(as_csv(rows), media_type="text/csv; charset=utf-8")
    return MetricsList(items=rows)


def as_csv(rows: list[dict]) -> str:
    """A header of every column any row has a value in; an empty cell where a row lacks one."""
    text = io.StringIO()
    writer = csv.DictWriter(
        text, fieldnames=table_columns(rows), restval="", extrasaction="ignore", lineterminator="\n"
    )
    writer.writeheader()
    writer.writerows(rows)
    return text.getvalue()
