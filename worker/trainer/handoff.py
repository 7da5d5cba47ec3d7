"""Rank 0's side of the hand-off to its launcher: it holds no credential and reaches neither
Redis nor the checkpoint store. Its reports go as JSON lines over a Unix socket in its slot
(`LauncherChannel`), and each checkpoint is written to its own folder and handed over
(`HandedOverStorage`): the launcher, outside the sandbox, checks the file against the report,
puts it in the store, and sends the report on with the job and attempt it knows."""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel

from trainjobs.contract.events import RankReport
from trainjobs.worker.trainer.checkpoints import StoredObject

CONNECT_SECONDS = 30.0


class LauncherChannel:
    """Sends rank 0's reports (metrics, progress, checkpoints) to the launcher, in order."""

    def __init__(self, path: str):
        self.socket = _connected(path)

    def send(self, payload: BaseModel) -> None:
        self.socket.sendall(RankReport.of(payload).model_dump_json().encode() + b"\n")


def _connected(path: str) -> socket.socket:
    deadline = time.monotonic() + CONNECT_SECONDS
    while True:
        channel = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            with socket_address(Path(path)) as address:
                channel.connect(address)
            return channel
        except OSError:
            channel.close()
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


SOCKET_PATH_BYTES = 100  # a Unix socket's address holds 108 bytes


@contextmanager
def socket_address(path: Path) -> Iterator[str]:
    """An address for a Unix socket at `path` that fits, however deep its folder: the path itself,
    or the socket's name in its folder's open descriptor (/proc/self/fd/N/name), held while the
    block binds or connects."""
    if len(os.fsencode(path)) <= SOCKET_PATH_BYTES:
        yield str(path)
        return
    folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        yield f"/proc/self/fd/{folder}/{path.name}"
    finally:
        os.close(folder)


class HandedOverStorage:
    """Checkpoint files in the rank's own folder, for the launcher to take: `write` puts the file
    at `checkpoints/<name>` and hashes it (the report that follows carries the hash, which the
    launcher checks); `delete` drops a file not yet taken; `load` reads a file the launcher
    fetched before the ranks started (a resume, an init). The launcher removes each file once it
    has it in the store, and the stored object when the report of its rotation comes."""

    def __init__(self, folder: Path):
        self.folder = folder
        self.spool = folder / "checkpoints"

    def write(self, relative: str, state: dict[str, Any]) -> StoredObject:
        self.spool.mkdir(exist_ok=True)
        path = self.spool / Path(relative).name
        partial = path.with_name(path.name + ".partial")
        torch.save(state, partial)
        with open(partial, "rb+") as file:
            os.fsync(file.fileno())
        os.replace(partial, path)
        digest = hashlib.sha256()
        with open(path, "rb") as file:
            for block in iter(lambda: file.read(1 << 20), b""):
                digest.update(block)
        return StoredObject(size_bytes=path.stat().st_size, sha256=digest.hexdigest())

    def delete(self, relative: str) -> None:
        pass  # the launcher deletes it when the rotation's report reaches it

    def load(self, relative: str) -> dict[str, Any]:
        return torch.load(self.folder / relative, map_location="cpu", weights_only=True)


def handed_over_file(folder: Path, relative: str) -> Path:
    """Where `HandedOverStorage` left the file for `relative` (the launcher's side of the rule)."""
    return folder / "checkpoints" / Path(relative).name
