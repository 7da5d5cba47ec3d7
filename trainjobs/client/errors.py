"""What the clients raise: `ApiError` (an error answer, with its status and the API's `detail`)
and its kinds, and `Unreachable`."""

from __future__ import annotations

import httpx


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


class TooManyRequests(ApiError):
    """The API is serving as many streams as it allows (429); `retry_after`: seconds it asks for."""

    def __init__(self, status: int, detail: str, retry_after: float | None = None):
        super().__init__(status, detail)
        self.retry_after = retry_after


_ERRORS = {401: Unauthorized, 403: Forbidden, 404: NotFound, 409: Conflict, 413: InvalidRequest, 422: InvalidRequest}


def raise_for(response: httpx.Response) -> None:
    """Raise the error an error answer stands for, with the API's detail as its message."""
    try:
        detail = response.json().get("detail", response.text)
    except ValueError:
        detail = response.text
    if isinstance(detail, list):  # validation errors: "field: message; ..."
        detail = "; ".join(f"{'.'.join(str(p) for p in item.get('loc', [])[1:])}: {item.get('msg')}" for item in detail)
    if response.status_code == 429:
        retry_after = response.headers.get("Retry-After", "")
        seconds = float(retry_after) if retry_after.replace(".", "", 1).isdigit() else None
        raise TooManyRequests(429, str(detail), seconds)
    raise _ERRORS.get(response.status_code, ApiError)(response.status_code, str(detail))
