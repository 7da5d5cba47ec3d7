"""Code archives (`POST /v1/code`, `GET` and `DELETE /v1/code/{id}`): the rules.

An upload is streamed to a temporary file as it arrives, hashed and counted on the way (past
`TRAINJOBS_CODE_MAX_BYTES`, 413 and the rest is never read), never held whole in memory. Then
every member is checked (trainjobs.contract.archives) before anything is kept: a refused archive
stores nothing. The bytes go to the checkpoint store under their sha256, once, whoever uploads
them; each owner who did has a row, and sees only their own.
"""

from __future__ import annotations

import hashlib
import logging
import os
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool

from trainjobs.contract.archives import ArchiveSummary, UnsafeArchive, scan
from trainjobs.contract.clock import utcnow
from trainjobs.contract.code import CODE_ID, CodeArchive, code_id, stored_path
from trainjobs.jobs.errors import Conflict, InvalidRequest, NotFound
from trainjobs.jobs.repositories import code_archives, jobs
from trainjobs.jobs.tables import CodeArchiveRow
from trainjobs.service.auth import Principal
from trainjobs.store import CheckpointStore

log = logging.getLogger(__name__)


class TooLarge(Exception):
    """The upload passed the size limit (the API answers 413)."""


@dataclass
class Upload:
    path: Path  # the bytes, in a temporary file the caller removes
    sha256: str
    size_bytes: int

    @property
    def code(self) -> str:
        return code_id(self.sha256)


async def receive(chunks: AsyncIterator[bytes], max_bytes: int) -> Upload:
    """The body, to a temporary file, hashed and counted as it comes; TooLarge past `max_bytes`."""
    handle, name = tempfile.mkstemp(prefix="trainjobs-code-", suffix=".tar.gz")
    digest, size = hashlib.sha256(), 0
    try:
        with os.fdopen(handle, "wb") as file:
            async for chunk in chunks:
                size += len(chunk)
                if size > max_bytes:
                    raise TooLarge(f"a code archive is at most {max_bytes} bytes (TRAINJOBS_CODE_MAX_BYTES)")
                digest.update(chunk)
                await run_in_threadpool(file.write, chunk)
    except BaseException:
        Path(name).unlink(missing_ok=True)
        raise
    return Upload(Path(name), digest.hexdigest(), size)


def known(session: Session, caller: Principal, code: str) -> CodeArchive | None:
    row = code_archives.get(session, caller.owner, code)
    return _document(row) if row is not None else None


def check_and_store(upload: Upload, store: CheckpointStore, max_unpacked_bytes: int) -> ArchiveSummary:
    """Check every member (422 naming the one refused), then put the bytes in the store, once
    for everyone who uploads them. Outside any transaction: an upload to S3 may take seconds."""
    try:
        with open(upload.path, "rb") as file:
            summary = scan(file, max_unpacked_bytes)
    except UnsafeArchive as refused:
        where = f"member {refused.member!r}: " if refused.member else ""
        raise InvalidRequest("body", f"{where}{refused.reason}") from None
    if store.size(stored_path(upload.code)) != upload.size_bytes:
        with open(upload.path, "rb") as file:
            store.put_stream(file, stored_path(upload.code))
    return summary


def record(session: Session, caller: Principal, upload: Upload, summary: ArchiveSummary) -> tuple[CodeArchive, bool]:
    """The caller's row for a stored archive; (its document, created). A concurrent upload of
    the same bytes by the same owner made it first: that one stands."""
    existing = code_archives.get(session, caller.owner, upload.code)
    if existing is not None:
        return _document(existing), False
    row = CodeArchiveRow(
        owner=caller.owner, id=upload.code, size_bytes=upload.size_bytes, files=summary.files, created_at=utcnow()
    )
    code_archives.add(session, row)
    return _document(row), True


def get_visible(session: Session, caller: Principal, code: str) -> CodeArchive:
    return _document(_owned(session, caller, code))


def delete(session: Session, caller: Principal, code: str) -> bool:
    """The caller's archive goes (409 while a job of theirs that has not ended names it); True
    when nobody else holds its bytes, which the caller removes from the store after the commit."""
    row = _owned(session, caller, code)
    waiting = jobs.unfinished_using_code(session, caller.owner, code)
    if waiting:
        raise Conflict(f"job {waiting[0].id} has not ended and runs code {code}: delete it once that has ended")
    code_archives.remove(session, row.owner, row.id)
    return not code_archives.held_by_anyone(session, code)


def check_usable(session: Session, owner: str, code: str | None) -> None:
    """A spec's `code` must name an archive its owner uploaded (422 naming `code` otherwise)."""
    if code is not None and code_archives.get(session, owner, code) is None:
        raise InvalidRequest("code", f"no code archive {code} of yours: upload it first (POST /v1/code)")


def remove_bytes(store: CheckpointStore, code: str) -> None:
    try:
        store.delete(stored_path(code))
    except Exception:
        log.exception("code archive %s deleted, but its bytes could not be removed from the store", code)


def _owned(session: Session, caller: Principal, code: str) -> CodeArchiveRow:
    row = code_archives.get(session, caller.owner, code) if CODE_ID.fullmatch(code) else None
    if row is None:
        raise NotFound(f"code archive {code} not found")
    return row


def _document(row: CodeArchiveRow) -> CodeArchive:
    return CodeArchive(id=row.id, size_bytes=row.size_bytes, files=row.files, created_at=row.created_at)
