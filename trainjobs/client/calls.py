"""Every call of the API, described once (`Call`: method, path, parameters, how to read the
answer) for both clients, which differ only in how they send it."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypedDict, TypeVar

import httpx
from pydantic import BaseModel

from trainjobs.client.errors import raise_for
from trainjobs.contract.code import CodeArchive, CodeLimits
from trainjobs.contract.job import CheckpointList, JobDocument, JobPage, MetricsList, WorkerList
from trainjobs.contract.sharing import OwnerList, OwnerSettingsDocument, OwnerSettingsUpdate, QueueView

AnswerT = TypeVar("AnswerT")
ModelT = TypeVar("ModelT", bound=BaseModel)


@dataclass(frozen=True)
class Call(Generic[AnswerT]):
    """One request and how to read its answer."""

    method: str
    path: str
    read: Callable[[httpx.Response], AnswerT]
    params: dict[str, Any] = field(default_factory=dict)
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)


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


def job_filters(
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


class Calls:
    """Every call of the API, described once for both clients."""

    @staticmethod
    def submit(spec: dict[str, Any], idempotency_key: str | None) -> Call[JobDocument]:
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return Call("POST", "/v1/jobs", _model(JobDocument), body=spec, headers=headers)

    @staticmethod
    def job(job_id: str) -> Call[JobDocument]:
        return Call("GET", f"/v1/jobs/{job_id}", _model(JobDocument))

    @staticmethod
    def jobs(limit: int, cursor: str | None, filters: dict[str, Any]) -> Call[JobPage]:
        params = {**filters, "limit": limit, **({"cursor": cursor} if cursor else {})}
        return Call("GET", "/v1/jobs", _model(JobPage), params=params)

    @staticmethod
    def cancel(job_id: str) -> Call[JobDocument]:
        return Call("POST", f"/v1/jobs/{job_id}/cancel", _model(JobDocument))

    @staticmethod
    def delete(job_id: str) -> Call[None]:
        return Call("DELETE", f"/v1/jobs/{job_id}", _nothing)

    @staticmethod
    def metrics(job_id: str) -> Call[MetricsList]:
        return Call("GET", f"/v1/jobs/{job_id}/metrics", _model(MetricsList))

    @staticmethod
    def checkpoints(job_id: str) -> Call[CheckpointList]:
        return Call("GET", f"/v1/jobs/{job_id}/checkpoints", _model(CheckpointList))

    @staticmethod
    def workers() -> Call[WorkerList]:
        return Call("GET", "/v1/workers", _model(WorkerList))

    @staticmethod
    def code_limits() -> Call[CodeLimits]:
        return Call("GET", "/v1/code/limits", _model(CodeLimits))

    @staticmethod
    def code(code: str) -> Call[CodeArchive]:
        return Call("GET", f"/v1/code/{code}", _model(CodeArchive))

    @staticmethod
    def delete_code(code: str) -> Call[None]:
        return Call("DELETE", f"/v1/code/{code}", _nothing)

    @staticmethod
    def queue(device: str) -> Call[QueueView]:
        return Call("GET", "/v1/queue", _model(QueueView), params={"device": device})

    @staticmethod
    def owners() -> Call[OwnerList]:
        return Call("GET", "/v1/owners", _model(OwnerList))

    @staticmethod
    def put_owner(owner: str, settings: OwnerSettingsUpdate) -> Call[OwnerSettingsDocument]:
        body = settings.model_dump(mode="json")
        return Call("PUT", f"/v1/owners/{owner}", _model(OwnerSettingsDocument), body=body)

    @staticmethod
    def logs(job_id: str, tail: int | None) -> Call[str]:
        return Call("GET", f"/v1/jobs/{job_id}/logs", _text, params={"tail": tail} if tail else {})


def answer(call: Call[AnswerT], response: httpx.Response) -> AnswerT:
    if response.status_code >= 400:
        raise_for(response)
    return call.read(response)


def changed(response: httpx.Response, job: JobDocument | None, etag: str | None) -> tuple[JobDocument, str | None]:
    """A poll's answer: the new document and ETag, or the ones we had on a 304."""
    if response.status_code == 304 and job is not None:
        return job, etag
    if response.status_code >= 400:
        raise_for(response)
    return JobDocument.model_validate_json(response.content), response.headers.get("ETag")


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}
