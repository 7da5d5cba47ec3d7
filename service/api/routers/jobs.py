"""/v1/jobs: submit, read and list jobs."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header, Query, Request, Response, status
from fastapi.responses import PlainTextResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from trainjobs.contract.job import JobDocument, JobPage
from trainjobs.contract.spec import JobSpec
from trainjobs.jobs import timeline
from trainjobs.jobs.job_cache import CachedJob, cached_form
from trainjobs.service import jobs, log_stream
from trainjobs.service.api.deps import State, bearer_scheme, require_caller, unit_of_work
from trainjobs.service.api.error_docs import errors
from trainjobs.service.api.stream_response import AdmittedStream
from trainjobs.service.sse import job_event_stream

MAX_JOB_ID_LENGTH = 64  # longer is no job's id: not worth a Redis key

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
async def get_job(
    job_id: str, request: Request, state: State, if_none_match: Annotated[str | None, Header()] = None
) -> Response:
    """Made to be polled: the version and document come from Redis (service.job_cache), with
    neither SQL nor a thread; only a job Redis does not hold is read from SQL (and then held)."""
    caller = require_caller(request)
    cached = await state.job_cache.lookup(job_id) if len(job_id) <= MAX_JOB_ID_LENGTH else None
    if cached is None or not caller.can_see(cached.owner):
        cached = await run_in_threadpool(_read_job, request, job_id)  # 404 unless the caller's
        await state.job_cache.remember(job_id, cached)
    etag = cached.etag(job_id)
    if etag in _entity_tags(if_none_match):
        return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers={"ETag": etag})
    return Response(cached.document, media_type="application/json", headers={"ETag": etag})


def _read_job(request: Request, job_id: str) -> CachedJob:
    with unit_of_work(request) as work:
        return cached_form(jobs.get_visible(work.session, work.caller, job_id))


def _entity_tags(if_none_match: str | None) -> set[str]:
    """The tags of an If-None-Match header; a weak tag (W/"...") compares as its strong self."""
    if not if_none_match:
        return set()
    return {tag.strip().removeprefix("W/") for tag in if_none_match.split(",") if tag.strip()}


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
    return AdmittedStream(
        job_event_stream(state.read_sessions, state.feeds, job.id, after),
        release=state.streams.admit(work.caller.owner),
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
    return AdmittedStream(
        log_stream.follow(state.read_sessions, state.feeds, job.id, attempt, tail),
        release=state.streams.admit(work.caller.owner),
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
