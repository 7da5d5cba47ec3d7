"""A small typed client for the trainjobs HTTP API (httpx, sync). The CLI is built on it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx


class ApiError(Exception):
    """An error answer from the API; `detail` is its readable message."""

    def __init__(self, status: int, detail: str):
        super().__init__(f"{status}: {detail}")
        self.status = status
        self.detail = detail


class Unauthorized(ApiError):
    pass


class NotFound(ApiError):
    pass


class Conflict(ApiError):
    pass


class InvalidRequest(ApiError):
    pass


_ERRORS = {401: Unauthorized, 404: NotFound, 409: Conflict, 413: InvalidRequest, 422: InvalidRequest}


class TrainJobsClient:
    def __init__(self, url: str, token: str | None, timeout: float = 30.0):
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

    def metrics(self, job_id: str) -> list[dict[str, Any]]:
        return self._json("GET", f"/v1/jobs/{job_id}/metrics")["items"]

    def checkpoints(self, job_id: str) -> list[dict[str, Any]]:
        return self._json("GET", f"/v1/jobs/{job_id}/checkpoints")["items"]

    def download_checkpoint(self, job_id: str, checkpoint_id: str, destination: Path) -> Path:
        with self.http.stream("GET", f"/v1/jobs/{job_id}/checkpoints/{checkpoint_id}") as response:
            if response.status_code != 200:
                response.read()
                _raise_for(response)
            with open(destination, "wb") as file:
                for chunk in response.iter_bytes():
                    file.write(chunk)
        return destination

    def _json(self, method: str, path: str, **kwargs) -> Any:
        response = self.http.request(method, path, **kwargs)
        if response.status_code >= 400:
            _raise_for(response)
        return response.json()


def _raise_for(response: httpx.Response) -> None:
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    if isinstance(detail, list):  # validation errors: "field: message; ..."
        detail = "; ".join(f"{'.'.join(str(p) for p in item.get('loc', [])[1:])}: {item.get('msg')}" for item in detail)
    raise _ERRORS.get(response.status_code, ApiError)(response.status_code, str(detail))
