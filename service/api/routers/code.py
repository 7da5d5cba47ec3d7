"""/v1/code: upload a code archive, read it, delete it."""

from __future__ import annotations

from fastapi import APIRouter, Request, Response, status
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from trainjobs.contract.code import CodeArchive, CodeLimits
from trainjobs.service import code_uploads
from trainjobs.service.api.deps import State, bearer_scheme, require_caller, unit_of_work
from trainjobs.service.api.error_docs import errors

router = APIRouter(prefix="/v1/code", tags=["code"], responses=errors(401, 404), dependencies=bearer_scheme)


@router.post(
    "",
    status_code=status.HTTP_201_CREATED,
    response_model=CodeArchive,
    responses={
        200: {"model": CodeArchive, "description": "the same bytes again: nothing stored twice"},
        **errors(413, 422),
    },
    openapi_extra={
        "requestBody": {"content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}}}
    },
)
async def upload_code(request: Request, state: State) -> Response:
    """A gzip'd tar of the caller's project, streamed; every member is checked before anything is
    kept (422 naming the member refused)."""
    require_caller(request)
    limit = state.settings.code_max_bytes
    declared = request.headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        return _too_large(limit)
    try:
        upload = await code_uploads.receive(request.stream(), limit)
    except code_uploads.TooLarge:
        return _too_large(limit)
    try:
        document, created = await run_in_threadpool(_keep, request, state, upload)
    finally:
        upload.path.unlink(missing_ok=True)
    status_code = status.HTTP_201_CREATED if created else status.HTTP_200_OK
    return JSONResponse(document.model_dump(mode="json"), status_code=status_code)


def _keep(request: Request, state: State, upload: code_uploads.Upload) -> tuple[CodeArchive, bool]:
    with unit_of_work(request) as work:
        known = code_uploads.known(work.session, work.caller, upload.code)
    if known is not None:
        return known, False
    summary = code_uploads.check_and_store(upload, state.checkpoint_store, state.settings.code_max_unpacked_bytes)
    with unit_of_work(request) as work:
        return code_uploads.record(work.session, work.caller, upload, summary)


def _too_large(limit: int) -> JSONResponse:
    detail = f"a code archive is at most {limit} bytes (TRAINJOBS_CODE_MAX_BYTES)"
    # 413 Content Too Large: Starlette renamed its constant, and both names warn in some version.
    return JSONResponse({"detail": detail}, status_code=413)


@router.get("/limits", response_model=CodeLimits)
def code_limits(request: Request, state: State) -> CodeLimits:
    """Before `/{code_id}`, which would take "limits" for an id (and answer 404)."""
    require_caller(request)
    settings = state.settings
    return CodeLimits(max_bytes=settings.code_max_bytes, max_unpacked_bytes=settings.code_max_unpacked_bytes)


@router.get("/{code_id}", response_model=CodeArchive)
def code_archive(code_id: str, request: Request) -> CodeArchive:
    with unit_of_work(request) as work:
        return code_uploads.get_visible(work.session, work.caller, code_id)


@router.delete("/{code_id}", status_code=status.HTTP_204_NO_CONTENT, responses=errors(409))
def delete_code_archive(code_id: str, request: Request, state: State) -> Response:
    with unit_of_work(request) as work:
        unused = code_uploads.delete(work.session, work.caller, code_id)
    if unused:
        code_uploads.remove_bytes(state.checkpoint_store, code_id)
    return Response(status_code=status.HTTP_204_NO_CONTENT)
