"""What a running job reports, and how it travels over the Redis stream.

Rank 0 and the launcher append events; the service's collector applies them to SQL. Every event
carries the job id and attempt, and what it says is keyed (metrics by epoch, checkpoints by id),
so applying one twice changes nothing.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

JobState = Literal["queued", "running", "cancelling", "succeeded", "failed", "cancelled"]
StopReason = Literal["completed", "early_stopping", "cancelled", "error", "timeout"]
TERMINAL_STATES: frozenset[str] = frozenset({"succeeded", "failed", "cancelled"})


class EpochMetrics(BaseModel):
    """One finished epoch, as `GET /v1/jobs/{id}/metrics` lists it. Extra keys are kept."""

    model_config = ConfigDict(extra="allow")

    epoch: int = Field(ge=1)
    train_loss: float
    val_loss: float
    val_accuracy: float | None = None
    lr: float
    epoch_seconds: float
    samples_per_second: float


class CheckpointRecord(BaseModel):
    id: str
    epoch: int
    size_bytes: int
    sha256: str
    is_best: bool
    created_at: datetime
    path: str = Field(description="relative to the checkpoint store")


class StateChange(BaseModel):
    state: JobState
    stop_reason: StopReason | None = None
    error: str | None = None


class CheckpointRemoved(BaseModel):
    id: str


EventKind = Literal["state", "metrics", "checkpoint", "checkpoint_removed"]
_PAYLOADS: dict[str, type[BaseModel]] = {
    "state": StateChange,
    "metrics": EpochMetrics,
    "checkpoint": CheckpointRecord,
    "checkpoint_removed": CheckpointRemoved,
}


class JobEvent(BaseModel):
    job_id: str
    attempt: int
    kind: EventKind
    data: dict[str, Any]

    def payload(self) -> BaseModel:
        return _PAYLOADS[self.kind].model_validate(self.data)

    @classmethod
    def of(cls, job_id: str, attempt: int, payload: BaseModel) -> JobEvent:
        kind = next(name for name, type_ in _PAYLOADS.items() if isinstance(payload, type_))
        return cls(job_id=job_id, attempt=attempt, kind=kind, data=payload.model_dump(mode="json"))

    def to_stream_fields(self) -> dict[str, str]:
        return {"job_id": self.job_id, "attempt": str(self.attempt), "kind": self.kind, "data": json.dumps(self.data)}

    @classmethod
    def from_stream_fields(cls, fields: dict[bytes | str, bytes | str]) -> JobEvent:
        text = {_text(key): _text(value) for key, value in fields.items()}
        return cls(
            job_id=text["job_id"], attempt=int(text["attempt"]), kind=text["kind"], data=json.loads(text["data"])
        )


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
