"""The checkpoint store: a local directory, or a URL that fsspec opens (`s3://bucket/prefix`
through s3fs, with the usual AWS variables, `AWS_ENDPOINT_URL` included for S3-compatible
servers). Objects are addressed by paths relative to the store's root, confined to it.

Torch-free: the worker writes and reads checkpoints through it (trainjobs.worker.trainer
.checkpoints adds torch's format), the API streams downloads from it.

An object appears whole or not at all: a local file is written beside its place and renamed
into it; a remote one is uploaded from a finished local file in one PUT (or one multipart upload,
which S3 makes visible only once it completes). An upload that fails leaves no object.
"""

from __future__ import annotations

import os
import posixpath
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import fsspec
from fsspec.implementations.local import LocalFileSystem

CHUNK_BYTES = 1 << 20


class CheckpointStore:
    def __init__(self, location: str):
        self.location = location
        self.fs: Any
        self.fs, root = fsspec.core.url_to_fs(location)
        self.is_local = isinstance(self.fs, LocalFileSystem)
        self.root = str(Path(root).resolve()) if self.is_local else root.rstrip("/")

    def path_of(self, relative: str) -> str:
        """The object's full path; a path that would leave the store is refused."""
        normal = posixpath.normpath(relative)
        if relative.startswith("/") or normal.startswith("..") or normal != relative.rstrip("/"):
            raise ValueError(f"{relative!r} is not a path inside the checkpoint store")
        return f"{self.root}/{normal}"

    def spool_for(self, relative: str) -> Path:
        """Where to write an object before it is put in place: beside it for a local store (so
        the rename is atomic), in a temporary directory for a remote one."""
        if self.is_local:
            destination = Path(self.path_of(relative))
            destination.parent.mkdir(parents=True, exist_ok=True)
            return destination.with_name(destination.name + ".partial")
        handle, name = tempfile.mkstemp(prefix="trainjobs-", suffix=".partial")
        os.close(handle)
        return Path(name)

    def put(self, spooled: Path, relative: str) -> None:
        """Move a finished local file into the store as `relative`, whole."""
        try:
            if self.is_local:
                os.replace(spooled, self.path_of(relative))
            else:
                self.fs.put_file(str(spooled), self.path_of(relative))
        finally:
            spooled.unlink(missing_ok=True)

    def put_stream(self, source: IO[bytes], relative: str) -> None:
        """Put what `source` holds (an open file of someone else's) in the store, whole: copied to
        a spool file first, then put as `put` does."""
        spooled = self.spool_for(relative)
        with open(spooled, "wb") as target:
            shutil.copyfileobj(source, target, CHUNK_BYTES)
            target.flush()
            os.fsync(target.fileno())
        self.put(spooled, relative)

    def fetch(self, relative: str, local: Path) -> None:
        """A copy of the object at `local`, whole (a resume's checkpoint, a code archive)."""
        partial = local.with_name(local.name + ".partial")
        with self.open(relative) as source, open(partial, "wb") as target:
            shutil.copyfileobj(source, target, CHUNK_BYTES)
        os.replace(partial, local)

    def open(self, relative: str) -> IO[bytes]:
        return self.fs.open(self.path_of(relative), "rb")

    def size(self, relative: str) -> int | None:
        """The object's size, or None when there is no such object."""
        try:
            return int(self.fs.size(self.path_of(relative)))
        except FileNotFoundError:
            return None

    def iter_bytes(self, relative: str) -> Iterator[bytes]:
        """The object in chunks, never whole in memory (the API streams a download from this)."""
        with self.open(relative) as file:
            while chunk := file.read(CHUNK_BYTES):
                yield chunk

    def delete(self, relative: str) -> None:
        try:
            self.fs.rm_file(self.path_of(relative))
        except FileNotFoundError:
            pass

    def delete_tree(self, relative: str) -> None:
        """Every object under `relative/` (a deleted job's folder); nothing there is no error."""
        path = self.path_of(relative)
        try:
            if self.fs.exists(path):
                self.fs.rm(path, recursive=True)
        except FileNotFoundError:
            pass
