"""/v1/workers: the fleet as its heartbeats describe it."""

from __future__ import annotations

import time

from fastapi import APIRouter, Request

from trainjobs.contract.job import WorkerInfo, WorkerList
from trainjobs.contract.workers import read_workers
from trainjobs.service import fleet
from trainjobs.service.api.deps import State, bearer_scheme, unit_of_work
from trainjobs.service.api.error_docs import errors

router = APIRouter(prefix="/v1/workers", tags=["workers"], responses=errors(401), dependencies=bearer_scheme)


@router.get("", response_model=WorkerList)
def list_workers(request: Request, state: State) -> WorkerList:
    with unit_of_work(request) as work:
        workers = fleet.visible_workers(
            work.session, work.caller, read_workers(state.redis, state.settings.keys.workers)
        )
    now = time.time()
    return WorkerList(
        items=[
            WorkerInfo(
                hostname=w.hostname,
                device=w.device,
                slots=w.slots,
                busy=w.busy,
                jobs=w.jobs,
                last_seen=w.last_seen_at,
                lost=w.is_lost(now, state.settings.worker_lost_seconds),
                sandbox=w.sandbox,
            )
            for w in workers
        ]
    )
