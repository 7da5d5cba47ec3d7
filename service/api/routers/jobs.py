"""/v1/jobs: submit, read and list jobs."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Header, Query, Response, status

from service import jobs
from service.api.deps import Caller, DbSession, State
from trainjobs.contract.job import JobDocument, JobPage
from trainjobs.contract.spec import JobSpec

router = APIRouter(prefix="/v1/jobs", tags=["jobs"])

StateFilter = Literal["queued", "running", "cancelling", "succeeded", "failed", "cancelled"]


@router.post("", status_code=status.HTTP_201_CREATED, response_model=JobDocument,
             responses={200: {"model": JobDocument, "description": "a repeat of an Idempotency-Key"}})
def submit_job(spec: JobSpec, session: DbSession, caller: Caller, state: State, response: Response,
               idempotency_key: Annotated[str | None, Header(max_length=256)] = None) -> JobDocument:
    job, created = jobs.submit(session, caller, spec, state.dispatcher, idempotency_key)
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    if not created:
        response.status_code = status.HTTP_200_OK
    return jobs.document(job)


@router.get("", response_model=JobPage)
def list_jobs(session: DbSession, caller: Caller, state: StateFilter | None = None,
              limit: Annotated[int, Query(ge=1, le=500)] = 50, cursor: str | None = None) -> JobPage:
    return jobs.list_page(session, caller, state=state, limit=limit, cursor=cursor)


@router.get("/{job_id}", response_model=JobDocument)
def get_job(job_id: str, session: DbSession, caller: Caller) -> JobDocument:
    return jobs.document(jobs.get_visible(session, caller, job_id))
