"""What a running job reports, and how it travels over the Redis stream.

Rank 0 and the launcher append events; the service's collector applies them to SQL. Every event
carries the job id and attempt, and what it says is keyed (metrics by epoch, checkpoints by id),
so applying one twice changes nothing.
"""

from __future__ import annotations

import json
import math
from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StringConstraints,
    TypeAdapter,
    field_validator,
    model_validator,
)

from trainjobs.contract.states import JobState, StopReason

# Bounds that match the SQL columns the collector writes (ids of 64 characters, 32-bit epochs):
# an event outside them is refused whole rather than failing its transaction again and again.
MAX_EPOCH = 100_000  # the spec's largest `epochs`
MAX_ATTEMPT = 1_000_000
ExtraValue = StrictBool | StrictInt | StrictFloat | Annotated[str, StringConstraints(max_length=256)] | None


class EpochMetrics(BaseModel):
    """One finished epoch, as `GET /v1/jobs/{id}/metrics` lists it. Extra keys are kept, as
    flat finite numbers or short strings. Every number is finite: a diverging run fails its job
    in the trainer instead."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False)

    epoch: int = Field(ge=1, le=MAX_EPOCH)
    train_loss: float
    val_loss: float
    val_accuracy: float | None = None
    lr: float
    epoch_seconds: float = Field(ge=0.0)
    samples_per_second: float = Field(ge=0.0)
    # Absent from epochs reported before these existed.
    data_wait_fraction: float | None = Field(
        None, ge=0.0, le=1.0, description="share of rank 0's training time waiting for data"
    )
    peak_memory_bytes: int | None = Field(None, ge=0, description="the most memory any rank held in the epoch")
    gpu_utilization: float | None = Field(
        None, ge=0.0, le=1.0, description="mean over ranks and the epoch; null on cpu"
    )

    @property
    def figures(self) -> dict[str, float]:
        """The epoch's train_/val_ figures, a model's own among them (`train_mae`, `val_f1`)."""
        return {
            name: value
            for name, value in self.model_dump().items()
            if name.startswith(("train_", "val_")) and isinstance(value, float)
        }

    @model_validator(mode="after")
    def _flat_extras(self) -> EpochMetrics:
        extras = self.__pydantic_extra__ or {}
        if len(extras) > 32:
            raise ValueError("at most 32 extra metrics")
        for key, value in extras.items():
            if len(key) > 64:
                raise ValueError("an extra metric's name is longer than 64 characters")
            extras[key] = TypeAdapter(ExtraValue).validate_python(value)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"extra metric {key!r} is not a finite number")
        return self


class Progress(BaseModel):
    """Inside the running epoch, from rank 0: at least every interval and at every epoch's end."""

    model_config = ConfigDict(allow_inf_nan=False)

    epoch: int = Field(ge=1, le=MAX_EPOCH)
    step: int = Field(ge=0, le=10**9)  # optimizer steps done in this epoch
    steps: int = Field(ge=0, le=10**9)  # optimizer steps per epoch
    samples_per_second: float = Field(ge=0.0)  # over the last interval
    eta_seconds: float | None = Field(None, ge=0.0)  # for the whole job
    at: datetime


class CheckpointRecord(BaseModel):
    id: str = Field(min_length=1, max_length=64)
    epoch: int = Field(ge=0, le=MAX_EPOCH, description="epochs finished")
    step: int = Field(0, ge=0, le=2**31, description="optimizer steps done in the next epoch (a preemption's)")
    size_bytes: int = Field(ge=0, le=2**62)
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    is_best: bool
    objective: float | None = Field(
        None, allow_inf_nan=False, description="the objective's value at this epoch (None inside an epoch)"
    )
    created_at: datetime
    path: str = Field(min_length=1, max_length=512, description="relative to the checkpoint store")


class StateChange(BaseModel):
    state: JobState
    stop_reason: StopReason | None = None
    error: str | None = Field(None, max_length=65_536)

    @field_validator("error")
    @classmethod
    def _no_nul(cls, error: str | None) -> str | None:
        # A traceback may quote any bytes; PostgreSQL's text holds no NUL.
        return error.replace("\x00", "\\x00") if error else error


class CheckpointRemoved(BaseModel):
    id: str = Field(min_length=1, max_length=64)


MAX_LOG_LINE_CHARS = 2000  # a longer line is cut, ending in "…"
MAX_LOG_LINES_PER_EVENT = 500


class LogLines(BaseModel):
    """A batch of one rank's output lines: lines `first_line`, `first_line` + 1, ... of its log
    in this attempt (numbered, so a batch delivered twice is kept once)."""

    rank: int = Field(ge=0, le=100_000)
    first_line: int = Field(ge=0, le=10**9)
    lines: list[Annotated[str, StringConstraints(max_length=MAX_LOG_LINE_CHARS)]] = Field(
        max_length=MAX_LOG_LINES_PER_EVENT
    )


EventKind = Literal["state", "metrics", "checkpoint", "checkpoint_removed", "logs", "progress"]
_PAYLOADS: dict[str, type[BaseModel]] = {
    "state": StateChange,
    "metrics": EpochMetrics,
    "checkpoint": CheckpointRecord,
    "checkpoint_removed": CheckpointRemoved,
    "logs": LogLines,
    "progress": Progress,
}


class JobEvent(BaseModel):
    job_id: str = Field(min_length=1, max_length=32)
    attempt: int = Field(ge=1, le=MAX_ATTEMPT)
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


# What rank 0 may tell its launcher (the launcher stamps job and attempt and sends it on): never a
# state, which the launcher decides, nor log lines, which it reads from the rank's files itself.
RANK_REPORTS = ("metrics", "progress", "checkpoint", "checkpoint_removed")


class RankReport(BaseModel):
    """One line on the channel from rank 0 to its launcher: what happened, not whose job it was."""

    kind: Literal["metrics", "progress", "checkpoint", "checkpoint_removed"]
    data: dict[str, Any]

    def payload(self) -> BaseModel:
        return _PAYLOADS[self.kind].model_validate(self.data)

    @classmethod
    def of(cls, payload: BaseModel) -> RankReport:
        kind = next(name for name, type_ in _PAYLOADS.items() if isinstance(payload, type_))
        return cls.model_validate({"kind": kind, "data": payload.model_dump(mode="json")})


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
