"""The error answers every route may give, for the OpenAPI document."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel


class ErrorBody(BaseModel):
    detail: str


# A 422: the shape of FastAPI's own validation errors. `loc` says where: ["body", "model",
# "params", "mu"], ["body", "code"]; `msg` why (for an archive, the member refused).
REFUSED_SCHEMA = {
    "type": "object",
    "required": ["detail"],
    "properties": {
        "detail": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["loc", "msg", "type"],
                "properties": {
                    "loc": {"type": "array", "items": {"anyOf": [{"type": "string"}, {"type": "integer"}]}},
                    "msg": {"type": "string"},
                    "type": {"type": "string"},
                },
            },
        }
    },
}


def errors(*codes: int) -> dict[int | str, dict[str, Any]]:
    descriptions = {
        401: "missing, invalid or revoked bearer token",
        403: "only an admin may do this (list another owner's jobs, change an owner's sharing settings)",
        404: "no such job (or checkpoint) that this token may see",
        409: "the job is not in a state that allows this (already ended; or, to delete, not yet ended)",
        413: "request body over the limit (1 MiB; a code archive: TRAINJOBS_CODE_MAX_BYTES)",
        422: "refused: `detail` names the field, or the archive's member, and why",
    }
    # The JSON content is spelled out (not `model=`) so that routes answering text or files
    # still document their errors as JSON.
    return {code: {"description": descriptions[code], "content": _json(code)} for code in codes}


def _json(code: int) -> dict[str, Any]:
    schema = REFUSED_SCHEMA if code == 422 else ErrorBody.model_json_schema()
    return {"application/json": {"schema": schema}}
