"""/v1/queue and /v1/owners: the queue in start order, and owners' sharing settings."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter, Path, Query, Request

from trainjobs.contract.sharing import OwnerList, OwnerSettingsDocument, OwnerSettingsUpdate, QueueView
from trainjobs.contract.workers import live_workers
from trainjobs.service import owners, sharing
from trainjobs.service.api.deps import State, bearer_scheme, unit_of_work
from trainjobs.service.api.error_docs import errors

router = APIRouter(tags=["sharing"], responses=errors(401), dependencies=bearer_scheme)
OWNER_NAME = Path(min_length=1, max_length=128, pattern=r"^[^\x00-\x1f\x7f]+$")


@router.get("/v1/queue", response_model=QueueView)
def queue(request: Request, state: State, device: Literal["cuda", "cpu"] = Query("cuda")) -> QueueView:
    """The queued jobs in the order they will start, each with why it has not, and each owner's
    weight, fair share and devices in use."""
    settings = state.settings
    workers = live_workers(state.redis, settings.keys.workers, settings.worker_lost_seconds)
    with unit_of_work(request) as work:
        return sharing.queue_view(work.session, work.caller, device, workers, settings)


@router.get("/v1/owners", response_model=OwnerList)
def list_owners(request: Request) -> OwnerList:
    with unit_of_work(request) as work:
        return owners.visible(work.session, work.caller)


@router.put("/v1/owners/{owner}", response_model=OwnerSettingsDocument, responses=errors(403))
def put_owner(update: OwnerSettingsUpdate, request: Request, owner: str = OWNER_NAME) -> OwnerSettingsDocument:
    """An owner's whole sharing settings (admins only)."""
    with unit_of_work(request) as work:
        return owners.put(work.session, work.caller, owner, update)
