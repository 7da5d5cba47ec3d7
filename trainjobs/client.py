"""A small typed client for the trainjobs HTTP API (httpx, sync). The CLI is built on it."""

from __future__ import annotations

import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import httpx


class ApiError(Exception):
    """An error answer from the API; `detail` is its readable message."""

    def __init__(self, status: int, detail: str):
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


class Unreachable(Exception):
    """The API did not answer (or answered 5xx) for longer than the client waits."""


class Unauthorized(ApiError):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class InvalidRequest(ApiError):
    pass


_ERRORS = {401: Unauthorized, 404: NotFound, 409: Conflict, 413: InvalidRequest, 422: InvalidRequest}


@dataclass(frozen=True)
class Event:
    id: int
    kind: str  # "state", "metrics" or "checkpoint"
    data: dict[str, Any]


class TrainJobsClient:
    def __init__(self, url: str, token: str | None, timeout: float = 30.0, give_up_after: float = 300.0):
        self.give_up_after = give_up_after  # seconds without an answer before events() stops trying
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self.http = httpx.Client(base_url=url.rstrip("/"), headers=headers, timeout=timeout)

    def submit(self, spec: dict[str, Any], idempotency_key: str | None = None) -> dict[str, Any]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._json("POST", "/v1/jobs", json=spec, headers=headers)

    def job(self, job_id: str) -> dict[str, Any]:
        return self._json("GET", f"/v1/jobs/{job_id}")

    def jobs(self, state: str | None = None, limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
        params = {key: value for key, value in {"state": state, "limit": limit, "cursor": cursor}.items() if value}
        return self._json("GET", "/v1/jobs", params=params)

    def cancel(self, job_id: str) -> dict[str, Any]:
        return self._json("POST", f"/v1/jobs/{job_id}/cancel")

    def logs(self, job_id: str, tail: int | None = None) -> str:
        response = self.http.get(f"/v1/jobs/{job_id}/logs", params={"tail": tail} if tail else None)
        if response.status_code >= 400:
            _raise_for(response)
        return response.text

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

    def workers(self) -> list[dict[str, Any]]:
        return self._items("/v1/workers")

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

    def metrics(self, job_id: str) -> list[dict[str, Any]]:
        return self._items(f"/v1/jobs/{job_id}/metrics")

    def checkpoints(self, job_id: str) -> list[dict[str, Any]]:
        return self._items(f"/v1/jobs/{job_id}/checkpoints")

    def download_checkpoint(self, job_id: str, checkpoint_id: str, destination: Path) -> Path:
        with self.http.stream("GET", f"/v1/jobs/{job_id}/checkpoints/{checkpoint_id}") as response:
            if response.status_code != 200:
                response.read()
                _raise_for(response)
            with open(destination, "wb") as file:
                for chunk in response.iter_bytes():
                    file.write(chunk)
        return destination

    def _json(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        response = self.http.request(method, path, **kwargs)
        if response.status_code >= 400:
            _raise_for(response)
        return cast(dict[str, Any], response.json())

    def _items(self, path: str) -> list[dict[str, Any]]:
        return cast(list[dict[str, Any]], self._json("GET", path)["items"])


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
