"""A checkpoint's file as the API serves it: from the checkpoint store (a local directory or an
object store), confined to the store, streamed in chunks so a large file is never held whole."""

from __future__ import annotations

from pathlib import Path

from fastapi.responses import FileResponse, StreamingResponse

from trainjobs.jobs.errors import NotFound
from trainjobs.jobs.tables import CheckpointRow
from trainjobs.store import CheckpointStore


def download(store: CheckpointStore, row: CheckpointRow) -> FileResponse | StreamingResponse:
    headers = {"X-Checkpoint-SHA256": row.sha256}
    try:
        path = store.path_of(row.path)
    except ValueError:
        raise NotFound("checkpoint file not found") from None
    if store.is_local:
        local = Path(path).resolve()  # a symlink must not lead out of the store either
        if not local.is_relative_to(Path(store.root)) or not local.is_file():
            raise NotFound("checkpoint file not found")
        return FileResponse(local, media_type="application/octet-stream", filename=f"{row.id}.pt", headers=headers)
    size = store.size(row.path)
    if size is None:
        raise NotFound("checkpoint file not found")
    headers.update({"Content-Length": str(size), "Content-Disposition": f'attachment; filename="{row.id}.pt"'})
    return StreamingResponse(store.iter_bytes(row.path), media_type="application/octet-stream", headers=headers)
