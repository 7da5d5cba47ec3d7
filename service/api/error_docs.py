"""The error answers every route may give, for the OpenAPI document."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ErrorBody(BaseModel):
    detail: str


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    descriptions = {
        401: "missing, invalid or revoked bearer token",
        403: "only an admin may do this (list another owner's jobs)",
        404: "no such job (or checkpoint) that this token may see",
        409: "the job is not in a state that allows this (already ended; or, to delete, not yet ended)",
        413: "request body over the limit (1 MiB)",
    }
    # The JSON content is spelled out (not `model=`) so that routes answering text or files
    # still document their errors as JSON.
    content = {"application/json": {"schema": ErrorBody.model_json_schema()}}
    return {code: {"description": descriptions[code], "content": content} for code in codes}
