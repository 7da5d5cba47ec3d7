"""Checkpoint files: written by rank 0 atomically into the store, rotated to `keep_last` plus
the best. Each file is a dict that `torch.load(path, weights_only=True)` opens; its "model" is
the plain model's state dict (no `module.` prefix)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import torch

from trainjobs.contract.events import CheckpointRecord
from worker.trainer.clock import utcnow

FORMAT_VERSION = 1


def checkpoint_id(job_id: str, epoch: int) -> str:
    return f"{job_id}-e{epoch:04d}"


class CheckpointStore:
    def __init__(self, root: Path):
        self.root = root

    def write(self, job_id: str, epoch: int, state: dict[str, Any], is_best: bool) -> CheckpointRecord:
        relative = f"{job_id}/{checkpoint_id(job_id, epoch)}.pt"
        path = self.root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        torch.save({"format_version": FORMAT_VERSION, **state}, temporary)
        with open(temporary, "rb+") as file:
            os.fsync(file.fileno())
        os.replace(temporary, path)  # a reader never sees half a file
        return CheckpointRecord(
            id=checkpoint_id(job_id, epoch), epoch=epoch, size_bytes=path.stat().st_size,
            sha256=_sha256(path), is_best=is_best, created_at=utcnow(), path=relative,
        )

    def delete(self, record: CheckpointRecord) -> None:
        (self.root / record.path).unlink(missing_ok=True)

    def load(self, relative: str) -> dict[str, Any]:
        return torch.load(self.root / relative, map_location="cpu", weights_only=True)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def to_remove(kept: list[CheckpointRecord], keep_last: int, best_id: str | None) -> list[CheckpointRecord]:
    """The checkpoints past the newest `keep_last`, except the best."""
    newest = sorted(kept, key=lambda record: record.epoch)[-keep_last:]
    keep = {record.id for record in newest} | ({best_id} if best_id else set())
    return [record for record in kept if record.id not in keep]
