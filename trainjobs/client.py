"""Typed clients for the trainjobs HTTP API: `TrainJobsClient` (sync) and
`AsyncTrainJobsClient` (httpx's async client, for async services that call this one). Both
return the contract's pydantic models and raise `ApiError` subclasses carrying the status and the
API's `detail`. The CLI is built on the sync one.

    with TrainJobsClient("http://127.0.0.1:8000", token) as client:
        job = client.submit(spec)
        final = client.wait(job.id, timeout=600)
        for job in client.iter_jobs(label=["team=speech"], state="failed"):
            client.delete(job.id)

Each call is described once (`_Call`: method, path, parameters, answer model); the two clients
differ only in how they send it.
"""

from __future__ import annotations

import asyncio
import json
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypedDict, TypeVar, Unpack

import httpx
from pydantic import BaseModel

from trainjobs.contract.events import EpochMetrics
from trainjobs.contract.job import (
    CheckpointInfo,
    CheckpointList,
    JobDocument,
    JobPage,
    MetricsList,
    WorkerInfo,
    WorkerList,
)
from trainjobs.contract.states import TERMINAL_STATES


class ApiError(Exception):
    """An error answer from the API: `status`, and `detail`, its readable message."""

    def __init__(self, status: int, detail: str):
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


class Unreachable(Exception):
    """The API did not answer (or answered 5xx) for longer than the client waits."""


class Unauthorized(ApiError):
    pass


class Forbidden(ApiError):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class InvalidRequest(ApiError):
    pass


_ERRORS = {401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 413: InvalidRequest, 422: InvalidRequest}


@dataclass(frozen=True)
class Event:
    id: int
    kind: str  # "state", "metrics", "checkpoint" or "progress"
    data: dict[str, Any]


AnswerT = TypeVar("AnswerT")


@dataclass(frozen=True)
class _Call(Generic[AnswerT]):
    """One request and how to read its answer."""

    method: str
    path: str
    read: Callable[[httpx.Response], AnswerT]
    params: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


ModelT = TypeVar("ModelT", bound=BaseModel)


def _model(model: type[ModelT]) -> Callable[[httpx.Response], ModelT]:
    return lambda response: model.model_validate_json(response.content)


def _nothing(_response: httpx.Response) -> None:
    return None


def _text(response: httpx.Response) -> str:
    return response.text


class JobFilters(TypedDict, total=False):
    """The filters of GET /v1/jobs: `state` one state or several; `label` "k=v" or "k", one or
    several (all must match); `name` a case-insensitive substring; `owner` (admins only)."""

    state: str | Sequence[str] | None
    label: str | Sequence[str] | None
    name: str | None
    owner: str | None


def _job_filters(
    state: str | Sequence[str] | None = None,
    label: str | Sequence[str] | None = None,
    name: str | None = None,
    owner: str | None = None,
) -> dict[str, Any]:
    """JobFilters as query parameters."""
    params: dict[str, Any] = {}
    if state:
        params["state"] = state if isinstance(state, str) else ",".join(state)
    if label:
        params["label"] = [label] if isinstance(label, str) else list(label)
    if name:
        params["name"] = name
    if owner:
        params["owner"] = owner
    return params


class _Calls:
    """Every call of the API, described once for both clients."""

    @staticmethod
    def submit(spec: dict[str, Any], idempotency_key: str | None) -> _Call[JobDocument]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return _Call("POST", "/v1/jobs", _model(JobDocument), body=spec, headers=headers)

    @staticmethod
    def job(job_id: str) -> _Call[JobDocument]:
        return _Call("GET", f"/v1/jobs/{job_id}", _model(JobDocument))

    @staticmethod
    def jobs(limit: int, cursor: str | None, filters: dict[str, Any]) -> _Call[JobPage]:
        params = {**filters, "limit": limit, **({"cursor": cursor} if cursor else {})}
        return _Call("GET", "/v1/jobs", _model(JobPage), params=params)

    @staticmethod
    def cancel(job_id: str) -> _Call[JobDocument]:
        return _Call("POST", f"/v1/jobs/{job_id}/cancel", _model(JobDocument))

    @staticmethod
    def delete(job_id: str) -> _Call[None]:
        return _Call("DELETE", f"/v1/jobs/{job_id}", _nothing)

    @staticmethod
    def metrics(job_id: str) -> _Call[MetricsList]:
        return _Call("GET", f"/v1/jobs/{job_id}/metrics", _model(MetricsList))

    @staticmethod
    def checkpoints(job_id: str) -> _Call[CheckpointList]:
        return _Call("GET", f"/v1/jobs/{job_id}/checkpoints", _model(CheckpointList))

    @staticmethod
    def workers() -> _Call[WorkerList]:
        return _Call("GET", "/v1/workers", _model(WorkerList))

    @staticmethod
    def logs(job_id: str, tail: int | None) -> _Call[str]:
        return _Call("GET", f"/v1/jobs/{job_id}/logs", _text, params={"tail": tail} if tail else {})


def _answer(call: _Call[AnswerT], response: httpx.Response) -> AnswerT:
    if response.status_code >= 400:
        _raise_for(response)
    return call.read(response)


def _headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


WAIT_POLL_SECONDS = 1.0


class TrainJobsClient:
    """The API over httpx's sync client. A context manager; `close()` ends its connections."""

    def __init__(self, url: str, token: str | None, timeout: float = 30.0, give_up_after: float = 300.0):
        self.give_up_after = give_up_after  # seconds without an answer before events() stops trying
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=_headers(token), timeout=timeout)

    def __enter__(self) -> TrainJobsClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _send(self, call: _Call[AnswerT]) -> AnswerT:
        response = self.http.request(call.method, call.path, params=call.params, json=call.body, headers=call.headers)
        return _answer(call, response)

    def submit(self, spec: dict[str, Any], idempotency_key: str | None = None) -> JobDocument:
        return self._send(_Calls.submit(spec, idempotency_key))

    def job(self, job_id: str) -> JobDocument:
        return self._send(_Calls.job(job_id))

    def jobs(self, limit: int = 50, cursor: str | None = None, **filters: Unpack[JobFilters]) -> JobPage:
        """One page of jobs, newest first; its `next_cursor` asks for the next."""
        return self._send(_Calls.jobs(limit, cursor, _job_filters(**filters)))

    def iter_jobs(self, page_size: int = 100, **filters: Unpack[JobFilters]) -> Iterator[JobDocument]:
        """Every matching job, newest first, fetching page after page as it is consumed."""
        query, cursor = _job_filters(**filters), None
        while True:
            page = self._send(_Calls.jobs(page_size, cursor, query))
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def cancel(self, job_id: str) -> JobDocument:
        return self._send(_Calls.cancel(job_id))

    def delete(self, job_id: str) -> None:
        """Delete an ended job with its metrics, events, logs and checkpoint files."""
        self._send(_Calls.delete(job_id))

    def wait(self, job_id: str, timeout: float | None = None, poll_seconds: float = WAIT_POLL_SECONDS) -> JobDocument:
        """The job once it has ended; `TimeoutError` after `timeout` seconds. Polls with the
        job's ETag, so an unchanged job costs the API a 304."""
        deadline = None if timeout is None else time.monotonic() + timeout
        job, etag = self._job_if_changed(job_id, None, None)
        while job.state not in TERMINAL_STATES:
            if deadline is not None and time.monotonic() + poll_seconds > deadline:
                raise TimeoutError(f"job {job_id} is still {job.state} after {timeout} s")
            time.sleep(poll_seconds)
            job, etag = self._job_if_changed(job_id, job, etag)
        return job

    def _job_if_changed(self, job_id: str, job: JobDocument | None, etag: str | None) -> tuple[JobDocument, str | None]:
        response = self.http.get(f"/v1/jobs/{job_id}", headers={"If-None-Match": etag} if etag else {})
        return _changed(response, job, etag)

    def logs(self, job_id: str, tail: int | None = None) -> str:
        return self._send(_Calls.logs(job_id, tail))

    def follow_logs(self, job_id: str, tail: int | None = None) -> Iterator[str]:
        """The job's log lines so far (the last `tail` of each rank, if given), then each new
        line as it arrives, until the job ends. A job may print nothing for long: no read
        timeout; a dropped connection raises."""
        params: dict[str, Any] = {"follow": "true", **({"tail": tail} if tail else {})}
        timeout = httpx.Timeout(30.0, read=None)
        with self.http.stream("GET", f"/v1/jobs/{job_id}/logs", params=params, timeout=timeout) as response:
            if response.status_code >= 400:
                response.read()
                _raise_for(response)
            yield from response.iter_lines()

    def workers(self) -> list[WorkerInfo]:
        return self._send(_Calls.workers()).items

    def metrics(self, job_id: str) -> list[EpochMetrics]:
        return self._send(_Calls.metrics(job_id)).items

    def checkpoints(self, job_id: str) -> list[CheckpointInfo]:
        return self._send(_Calls.checkpoints(job_id)).items

    def events(self, job_id: str, after: int = 0) -> Iterator[Event]:
        """The job's server-sent events from after `after`, until its terminal state.

        A dropped connection, or an API that is away (no answer, or 5xx), is retried with
        jittered exponential back-off up to `RECONNECT_CAP_SECONDS` apart, resuming with
        Last-Event-ID; after `give_up_after` seconds without an answer it raises `Unreachable`."""
        failures, last_answer = 0, time.monotonic()
        while True:
            headers = {"Last-Event-ID": str(after)} if after else {}
            try:
                with self.http.stream(
                    "GET", f"/v1/jobs/{job_id}/events", headers=headers, timeout=httpx.Timeout(30.0, read=60.0)
                ) as response:
                    if response.status_code < 500:
                        failures, last_answer = 0, time.monotonic()
                    if response.status_code >= 400:
                        response.read()
                        if response.status_code < 500:
                            _raise_for(response)
                        raise httpx.RemoteProtocolError(f"HTTP {response.status_code}")
                    for event in _parse_sse(response.iter_lines()):
                        after, last_answer = event.id, time.monotonic()
                        yield event
                return
            except (httpx.TransportError, httpx.RemoteProtocolError) as error:
                if time.monotonic() - last_answer > self.give_up_after:
                    raise Unreachable(
                        f"no answer from {self.http.base_url} for {self.give_up_after:.0f} s ({error})"
                    ) from error
                failures += 1
                time.sleep(reconnect_delay(failures))

    def download_checkpoint(self, job_id: str, checkpoint_id: str, destination: Path) -> Path:
        with self.http.stream("GET", f"/v1/jobs/{job_id}/checkpoints/{checkpoint_id}") as response:
            if response.status_code != 200:
                response.read()
                _raise_for(response)
            with open(destination, "wb") as file:
                for chunk in response.iter_bytes():
                    file.write(chunk)
        return destination


class AsyncTrainJobsClient:
    """The same calls on httpx's async client: `async with AsyncTrainJobsClient(url, token) as
    client: job = await client.wait(job_id)`."""

    def __init__(self, url: str, token: str | None, timeout: float = 30.0):
        self.http = httpx.AsyncClient(base_url=url.rstrip("/"), headers=_headers(token), timeout=timeout)

    async def __aenter__(self) -> AsyncTrainJobsClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self.http.aclose()

    async def _send(self, call: _Call[AnswerT]) -> AnswerT:
        response = await self.http.request(
            call.method, call.path, params=call.params, json=call.body, headers=call.headers
        )
        return _answer(call, response)

    async def submit(self, spec: dict[str, Any], idempotency_key: str | None = None) -> JobDocument:
        return await self._send(_Calls.submit(spec, idempotency_key))

    async def job(self, job_id: str) -> JobDocument:
        return await self._send(_Calls.job(job_id))

    async def jobs(self, limit: int = 50, cursor: str | None = None, **filters: Unpack[JobFilters]) -> JobPage:
        return await self._send(_Calls.jobs(limit, cursor, _job_filters(**filters)))

    async def iter_jobs(self, page_size: int = 100, **filters: Unpack[JobFilters]) -> AsyncIterator[JobDocument]:
        query, cursor = _job_filters(**filters), None
        while True:
            page = await self._send(_Calls.jobs(page_size, cursor, query))
            for job in page.items:
                yield job
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def cancel(self, job_id: str) -> JobDocument:
        return await self._send(_Calls.cancel(job_id))

    async def delete(self, job_id: str) -> None:
        await self._send(_Calls.delete(job_id))

    async def wait(
        self, job_id: str, timeout: float | None = None, poll_seconds: float = WAIT_POLL_SECONDS
    ) -> JobDocument:
        deadline = None if timeout is None else time.monotonic() + timeout
        job, etag = _changed(await self.http.get(f"/v1/jobs/{job_id}"), None, None)
        while job.state not in TERMINAL_STATES:
            if deadline is not None and time.monotonic() + poll_seconds > deadline:
                raise TimeoutError(f"job {job_id} is still {job.state} after {timeout} s")
            await asyncio.sleep(poll_seconds)
            response = await self.http.get(f"/v1/jobs/{job_id}", headers={"If-None-Match": etag} if etag else {})
            job, etag = _changed(response, job, etag)
        return job

    async def logs(self, job_id: str, tail: int | None = None) -> str:
        return await self._send(_Calls.logs(job_id, tail))

    async def workers(self) -> list[WorkerInfo]:
        return (await self._send(_Calls.workers())).items

    async def metrics(self, job_id: str) -> list[EpochMetrics]:
        return (await self._send(_Calls.metrics(job_id))).items

    async def checkpoints(self, job_id: str) -> list[CheckpointInfo]:
        return (await self._send(_Calls.checkpoints(job_id))).items


def _changed(response: httpx.Response, job: JobDocument | None, etag: str | None) -> tuple[JobDocument, str | None]:
    """A poll's answer: the new document and ETag, or the ones we had on a 304."""
    if response.status_code == 304 and job is not None:
        return job, etag
    if response.status_code >= 400:
        _raise_for(response)
    return JobDocument.model_validate_json(response.content), response.headers.get("ETag")


RECONNECT_BASE_SECONDS = 0.25
RECONNECT_CAP_SECONDS = 10.0


def reconnect_delay(failures: int) -> float:
    """Exponential back-off, capped, with jitter (so many clients of one API that comes back do
    not reconnect in step): half the step for sure, the other half at random."""
    step = min(RECONNECT_CAP_SECONDS, RECONNECT_BASE_SECONDS * 2.0 ** min(failures, 16))
    return step / 2 + random.uniform(0, step / 2)


def _parse_sse(lines: Iterator[str]) -> Iterator[Event]:
    event_id: str | None = None
    kind, data = "message", list[str]()
    for line in lines:
        if line == "":
            if data and event_id is not None:
                yield Event(int(event_id), kind, json.loads("\n".join(data)))
            event_id, kind, data = None, "message", []
        elif line.startswith(":"):
            continue
        else:
            field, _, value = line.partition(":")
            value = value.removeprefix(" ")
            if field == "id":
                event_id = value
            elif field == "event":
                kind = value
            elif field == "data":
                data.append(value)


def _raise_for(response: httpx.Response) -> None:
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    if isinstance(detail, list):  # validation errors: "field: message; ..."
        detail = "; ".join(f"{'.'.join(str(p) for p in item.get('loc', [])[1:])}: {item.get('msg')}" for item in detail)
    raise _ERRORS.get(response.status_code, ApiError)(response.status_code, str(detail))
