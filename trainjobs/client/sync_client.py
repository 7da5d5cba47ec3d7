"""`TrainJobsClient`: the API over httpx's sync client (the CLI is built on it)."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Unpack

import httpx
from httpx_sse import SSEError, connect_sse

from trainjobs.client.calls import AnswerT, Call, Calls, JobFilters, answer, auth_headers, changed, job_filters
from trainjobs.client.errors import NotFound, Unreachable, raise_for
from trainjobs.client.packing import Packed
from trainjobs.client.reconnect import reconnect_delay
from trainjobs.contract.code import CodeArchive, CodeLimits
from trainjobs.contract.events import EpochMetrics
from trainjobs.contract.job import CheckpointInfo, JobDocument, JobPage, WorkerInfo
from trainjobs.contract.sharing import OwnerSettingsDocument, OwnerSettingsUpdate, QueueView
from trainjobs.contract.states import TERMINAL_STATES

WAIT_POLL_SECONDS = 1.0
GZIP = {"Content-Type": "application/gzip"}
UPLOAD_TIMEOUT = httpx.Timeout(30.0, write=600.0)  # an archive may take minutes to send


@dataclass(frozen=True)
class Event:
    id: int
    kind: str  # "state", "metrics", "checkpoint" or "progress"
    data: dict[str, Any]


class _Away(Exception):
    """The API did not answer, or answered 5xx: try again later."""


class TrainJobsClient:
    """The API over httpx's sync client. A context manager; `close()` ends its connections."""

    def __init__(self, url: str, token: str | None, timeout: float = 30.0, give_up_after: float = 300.0):
        self.give_up_after = give_up_after  # seconds without an answer before events() stops trying
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=auth_headers(token), timeout=timeout)

    def __enter__(self) -> TrainJobsClient:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _send(self, call: Call[AnswerT]) -> AnswerT:
        response = self.http.request(call.method, call.path, params=call.params, json=call.body, headers=call.headers)
        return answer(call, response)

    def submit(self, spec: dict[str, Any], idempotency_key: str | None = None) -> JobDocument:
        return self._send(Calls.submit(spec, idempotency_key))

    def job(self, job_id: str) -> JobDocument:
        return self._send(Calls.job(job_id))

    def jobs(self, limit: int = 50, cursor: str | None = None, **filters: Unpack[JobFilters]) -> JobPage:
        """One page of jobs, newest first; its `next_cursor` asks for the next."""
        return self._send(Calls.jobs(limit, cursor, job_filters(**filters)))

    def iter_jobs(self, page_size: int = 100, **filters: Unpack[JobFilters]) -> Iterator[JobDocument]:
        """Every matching job, newest first, fetching page after page as it is consumed."""
        query, cursor = job_filters(**filters), None
        while True:
            page = self._send(Calls.jobs(page_size, cursor, query))
            yield from page.items
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    def cancel(self, job_id: str) -> JobDocument:
        return self._send(Calls.cancel(job_id))

    def delete(self, job_id: str) -> None:
        """Delete an ended job with its metrics, events, logs and checkpoint files."""
        self._send(Calls.delete(job_id))

    def wait(self, job_id: str, timeout: float | None = None, poll_seconds: float = WAIT_POLL_SECONDS) -> JobDocument:
        """The job once it has ended; `TimeoutError` after `timeout` seconds. Polls with the
        job's ETag, so an unchanged job costs the API a 304."""
        deadline = None if timeout is None else time.monotonic() + timeout
        job, etag = changed(self.http.get(f"/v1/jobs/{job_id}"), None, None)
        while job.state not in TERMINAL_STATES:
            if deadline is not None and time.monotonic() + poll_seconds > deadline:
                raise TimeoutError(f"job {job_id} is still {job.state} after {timeout} s")
            time.sleep(poll_seconds)
            response = self.http.get(f"/v1/jobs/{job_id}", headers={"If-None-Match": etag} if etag else {})
            job, etag = changed(response, job, etag)
        return job

    def logs(self, job_id: str, tail: int | None = None) -> str:
        return self._send(Calls.logs(job_id, tail))

    def follow_logs(self, job_id: str, tail: int | None = None) -> Iterator[str]:
        """The job's log lines so far (the last `tail` of each rank, if given), then each new
        line as it arrives, until the job ends. A job may print nothing for long: no read
        timeout; a dropped connection raises."""
        params: dict[str, Any] = {"follow": "true", **({"tail": tail} if tail else {})}
        timeout = httpx.Timeout(30.0, read=None)
        with self.http.stream("GET", f"/v1/jobs/{job_id}/logs", params=params, timeout=timeout) as response:
            if response.status_code >= 400:
                response.read()
                raise_for(response)
            yield from response.iter_lines()

    def workers(self) -> list[WorkerInfo]:
        return self._send(Calls.workers()).items

    def metrics(self, job_id: str) -> list[EpochMetrics]:
        return self._send(Calls.metrics(job_id)).items

    def checkpoints(self, job_id: str) -> list[CheckpointInfo]:
        return self._send(Calls.checkpoints(job_id)).items

    def events(self, job_id: str, after: int = 0) -> Iterator[Event]:
        """The job's server-sent events from after `after`, until its terminal state.

        A dropped connection, or an API that is away (no answer, or 5xx), is tried again with
        jittered exponential back-off (trainjobs.client.reconnect), resuming with
        Last-Event-ID; after `give_up_after` seconds without an answer it raises `Unreachable`."""
        failures, last_answer = 0, time.monotonic()

        def answered() -> None:
            nonlocal failures, last_answer
            failures, last_answer = 0, time.monotonic()

        while True:
            try:
                for event in self._event_stream(job_id, after, answered):
                    after = event.id
                    answered()
                    yield event
                return
            except _Away as away:
                if time.monotonic() - last_answer > self.give_up_after:
                    raise Unreachable(
                        f"no answer from {self.http.base_url} for {self.give_up_after:.0f} s ({away})"
                    ) from away
                failures += 1
                time.sleep(reconnect_delay(failures))

    def _event_stream(self, job_id: str, after: int, answered: Callable[[], None]) -> Iterator[Event]:
        """One connection's events (httpx-sse parses them); `answered()` once the API answers
        (below 500); `_Away` when it does not, or the stream drops."""
        headers = {"Last-Event-ID": str(after)} if after else {}
        timeout = httpx.Timeout(30.0, read=60.0)
        try:
            with connect_sse(self.http, "GET", f"/v1/jobs/{job_id}/events", headers=headers, timeout=timeout) as source:
                status = source.response.status_code
                if status >= 500:
                    raise _Away(f"HTTP {status}")
                answered()
                if status >= 400:
                    source.response.read()
                    raise_for(source.response)
                for sse in source.iter_sse():
                    if sse.id and sse.data:
                        yield Event(int(sse.id), sse.event, json.loads(sse.data))
        except (httpx.TransportError, httpx.RemoteProtocolError, SSEError) as error:
            raise _Away(str(error) or type(error).__name__) from error

    def queue(self, device: str = "cuda") -> QueueView:
        """The queued jobs of `device` in start order, with reasons, and each owner's share."""
        return self._send(Calls.queue(device))

    def owners(self) -> list[OwnerSettingsDocument]:
        return (self._send(Calls.owners())).items

    def put_owner(self, owner: str, settings: OwnerSettingsUpdate) -> OwnerSettingsDocument:
        """An owner's whole sharing settings (admins only)."""
        return self._send(Calls.put_owner(owner, settings))

    def code_limits(self) -> CodeLimits:
        """This API's bounds on a code archive (an older API without them: NotFound)."""
        return self._send(Calls.code_limits())

    def code(self, code: str) -> CodeArchive:
        return self._send(Calls.code(code))

    def delete_code(self, code: str) -> None:
        self._send(Calls.delete_code(code))

    def push_code(self, packed: Packed) -> tuple[CodeArchive, bool]:
        """The API's archive of these bytes, uploaded unless the API has it already; (the
        archive, uploaded). Pack a folder with trainjobs.client.packing.pack first."""
        try:
            return self.code(packed.code), False
        except NotFound:
            pass
        with open(packed.path, "rb") as archive:
            response = self.http.post(
                "/v1/code", content=archive, headers=GZIP, timeout=httpx.Timeout(30.0, write=600.0)
            )
        if response.status_code >= 400:
            raise_for(response)
        return CodeArchive.model_validate_json(response.content), True

    def download_checkpoint(self, job_id: str, checkpoint_id: str, destination: Path) -> Path:
        with self.http.stream("GET", f"/v1/jobs/{job_id}/checkpoints/{checkpoint_id}") as response:
            if response.status_code != 200:
                response.read()
                raise_for(response)
            with open(destination, "wb") as file:
                for chunk in response.iter_bytes():
                    file.write(chunk)
        return destination
