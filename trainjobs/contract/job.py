"""The API's answers about jobs: the job document (what every response that returns a job
carries), pages of jobs, an epoch's metrics list, checkpoints and workers. The service answers
with these and the client returns them."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, Field

from trainjobs.contract.events import EpochMetrics
from trainjobs.contract.states import JobState, StopReason


class Effective(BaseModel):
    world_size: int
    global_batch_size: int
    lr: float


class JobDocument(BaseModel):
    id: str
    name: str | None
    owner: str
    state: JobState
    stop_reason: StopReason | None
    spec: dict[str, Any] = Field(description="the job spec with every default filled in")
    effective: Effective
    epoch: int
    metrics: dict[str, Any] | None
    error: str | None
    waiting_reason: str | None
    worker: str | None
    workers: list[str] = Field(
        default_factory=list, description="the worker of each node, node 0 first ([] before it starts)"
    )
    attempt: int
    preemptions: int = Field(0, description="times this job was preempted (they never count towards giving up)")
    progress: dict[str, Any] | None = Field(
        None, description="inside the running epoch: steps done and per epoch, samples/s, ETA; null when not running"
    )
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None


class JobPage(BaseModel):
    items: list[JobDocument]
    next_cursor: str | None


class MetricsList(BaseModel):
    items: list[EpochMetrics]


class CheckpointInfo(BaseModel):
    id: str
    epoch: int
    step: int = Field(0, description="optimizer steps already done in the next epoch (0 at an epoch's end)")
    size_bytes: int
    sha256: str
    is_best: bool
    objective: float | None = Field(None, description="the objective's value at that epoch (null inside an epoch)")
    created_at: datetime


class CheckpointList(BaseModel):
    items: list[CheckpointInfo]


class WorkerInfo(BaseModel):
    hostname: str
    device: str
    slots: int
    busy: int
    jobs: list[str]
    last_seen: datetime
    lost: bool
    sandbox: bool = False


class WorkerList(BaseModel):
    items: list[WorkerInfo]
