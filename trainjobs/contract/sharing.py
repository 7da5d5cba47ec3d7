"""Sharing the fleet, as the API shows it: an owner's sharing settings (`GET /v1/owners`, `PUT
/v1/owners/{owner}`) and the queue in start order with each owner's share (`GET /v1/queue`)."""

from __future__ import annotations

from pydantic import BaseModel, Field

from trainjobs.contract.catalog import StrictModel

DEFAULT_WEIGHT = 1.0
DEFAULT_MAX_PRIORITY = 50


class MaxDevices(StrictModel):
    cuda: int | None = Field(None, ge=0, le=1_000_000, description="null: no cap")
    cpu: int | None = Field(None, ge=0, le=1_000_000, description="null: no cap")


class OwnerSettingsUpdate(StrictModel):
    """The body of `PUT /v1/owners/{owner}`: the whole settings (a field left out takes its default)."""

    weight: float = Field(DEFAULT_WEIGHT, gt=0.0, le=1_000_000.0)
    max_devices: MaxDevices = Field(default_factory=MaxDevices)
    max_priority: int = Field(DEFAULT_MAX_PRIORITY, ge=0, le=100)
    allow_non_preemptible: bool = False


class OwnerSettingsDocument(OwnerSettingsUpdate):
    owner: str


class OwnerList(BaseModel):
    items: list[OwnerSettingsDocument]


class QueueEntry(BaseModel):
    job: str | None = Field(description="the job's id; null for another owner's job, to a non-admin")
    owner: str
    priority: int
    devices: int
    reason: str | None = Field(description="why it has not started: the same text as its waiting_reason")


class QueueOwner(BaseModel):
    owner: str
    weight: float
    share: float = Field(description="capacity x weight / the weights of every owner with a queued or running job")
    in_use: int
    max_devices: int | None


class QueueView(BaseModel):
    items: list[QueueEntry] = Field(description="the queued jobs in the order they will start")
    owners: list[QueueOwner]
