"""/v1/jobs/{id}/checkpoints: the list, and each file."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response
from fastapi.responses import FileResponse

from trainjobs.contract.job import CheckpointInfo, CheckpointList
from trainjobs.jobs.errors import NotFound
from trainjobs.jobs.repositories import checkpoints
from trainjobs.service import checkpoint_files, jobs
from trainjobs.service.api.deps import State, bearer_scheme, unit_of_work
from trainjobs.service.api.error_docs import errors

router = APIRouter(
    prefix="/v1/jobs/{job_id}/checkpoints", tags=["checkpoints"], responses=errors(401, 404), dependencies=bearer_scheme
)


@router.get("", response_model=CheckpointList)
def list_checkpoints(job_id: str, request: Request) -> CheckpointList:
    with unit_of_work(request) as work:
        job = jobs.get_visible(work.session, work.caller, job_id)
        rows = checkpoints.for_job(work.session, job.id)
        return CheckpointList(items=[CheckpointInfo.model_validate(row, from_attributes=True) for row in rows])


@router.get(
    "/{checkpoint_id}",
    response_class=FileResponse,
    responses={200: {"content": {"application/octet-stream": {}}, "description": "the checkpoint file"}},
)
def download_checkpoint(job_id: str, checkpoint_id: str, request: Request, state: State) -> Response:
    with unit_of_work(request) as work:
        job = jobs.get_visible(work.session, work.caller, job_id)
        row = checkpoints.get(work.session, checkpoint_id)
        if row is None or row.job_id != job.id:
            raise NotFound(f"checkpoint {checkpoint_id} not found")
    return checkpoint_files.download(state.checkpoint_store, row)
