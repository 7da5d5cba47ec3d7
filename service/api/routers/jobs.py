"""/v1/jobs: submit, read and list jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.responses import PlainTextResponse, StreamingResponse

from trainjobs.contract.job import JobDocument, JobPage
from trainjobs.contract.spec import JobSpec
from trainjobs.service import jobs, log_stream, timeline
from trainjobs.service.api.deps import State, bearer_scheme, unit_of_work
from trainjobs.service.api.error_docs import errors
from trainjobs.service.sse import job_event_stream

router = APIRouter(prefix="/v1/jobs", tags=["jobs"], responses=errors(401, 404), dependencies=bearer_scheme)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=JobDocument,
    responses={200: {"model": JobDocument, "description": "a repeat of an Idempotency-Key"}, **errors(413)},
)
def submit_job(
    spec: JobSpec,
    request: Request,
    state: State,
    response: Response,
    idempotency_key: Annotated[str | None, Header(max_length=256)] = None,
) -> JobDocument:
    with unit_of_work(request) as work:
        job, created = jobs.submit(work.session, work.caller, spec, state.dispatcher, idempotency_key)
        document = timeline.document(job)
    response.headers["Location"] = f"/v1/jobs/{job.id}"
    if not created:
        response.status_code = status.HTTP_200_OK
    return document


@router.get("", response_model=JobPage, responses=errors(403))
def list_jobs(
    request: Request,
    state: Annotated[
        str | None, Query(max_length=200, description="one state or several, comma-separated: queued,running")
    ] = None,
    label: Annotated[
        list[str] | None,
        Query(description="`k=v` keeps jobs labelled so, `k` any value of k; repeat for AND"),
    ] = None,
    name: Annotated[str | None, Query(max_length=128, description="a case-insensitive substring of the name")] = None,
    owner: Annotated[str | None, Query(max_length=128, description="one owner's jobs (admins only)")] = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    cursor: Annotated[str | None, Query(max_length=512)] = None,
) -> JobPage:
    with unit_of_work(request) as work:
        return jobs.list_page(
            work.session, work.caller, states=state, labels=label, name=name, owner=owner, limit=limit, cursor=cursor
        )


@router.get("/{job_id}", response_model=JobDocument, responses={304: {"description": "unchanged since the ETag given"}})
def get_job(job_id: str, request: Request, response: Response, if_none_match: Annotated[str | None, Header()] = None):
    with unit_of_work(request) as work:
        job = jobs.get_visible(work.session, work.caller, job_id)
        # Every change to a job bumps updated_at, so it names the document's version: a poll of
        # an unchanged job costs one indexed read and no serialisation.
        etag = f'"{job.id}-{int(job.updated_at.timestamp() * 1_000_000)}"'
        if if_none_match is not None and etag in [tag.strip() for tag in if_none_match.split(",")]:
            return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
        response.headers["ETag"] = etag
        return timeline.document(job)


@router.get(
    "/{job_id}/events",
    response_class=StreamingResponse,
    responses={
        200: {
            "content": {"text/event-stream": {}},
            "description": "events `state` (the job), `metrics` (one epoch), `checkpoint`",
        }
    },
)
def job_events(
    job_id: str, request: Request, state: State, last_event_id: Annotated[str | None, Header()] = None
) -> StreamingResponse:
    with unit_of_work(request) as work:
        job = jobs.get_visible(work.session, work.caller, job_id)
    after = jobs.parse_last_event_id(last_event_id)
    return StreamingResponse(
        job_event_stream(state.read_sessions, job.id, after),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/{job_id}/logs",
    response_class=PlainTextResponse,
    responses={
        200: {
            "content": {"text/plain": {}},
            "description": "every rank's output, lines prefixed [rank N]; with follow=true, new lines as they "
            "arrive until the job ends",
        }
    },
)
def job_logs(
    job_id: str,
    request: Request,
    state: State,
    tail: Annotated[int | None, Query(ge=1, le=100_000)] = None,
    attempt: Annotated[int | None, Query(ge=1, le=1_000_000, description="an earlier attempt's [the latest]")] = None,
    follow: bool = False,
) -> Response:
    with unit_of_work(request) as work:
        job = jobs.get_visible(work.session, work.caller, job_id)
        attempt = attempt or job.attempt
        if not follow:
            return PlainTextResponse(log_stream.attempt_text(work.session, job.id, attempt, tail))
    return StreamingResponse(
        log_stream.follow(state.read_sessions, job.id, attempt, tail),
        media_type="text/plain; charset=utf-8",
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"},
    )


@router.delete("/{job_id}", status_code=status.HTTP_204_NO_CONTENT, responses=errors(409))
def delete_job(job_id: str, request: Request, state: State) -> Response:
    with unit_of_work(request) as work:
        jobs.delete(work.session, work.caller, job_id, state.checkpoint_store)
    return Response(status_code=status.HTTP_204_NO_CONTENT)


@router.post(
    "/{job_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=JobDocument, responses=errors(409)
)
def cancel_job(job_id: str, request: Request) -> JobDocument:
    with unit_of_work(request) as work:
        return timeline.document(jobs.cancel(work.session, work.caller, job_id))
