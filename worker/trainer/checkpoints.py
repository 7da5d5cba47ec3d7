"""Checkpoints: a storage interface, its implementation over the checkpoint store, and the checkpointer
that owns what a job keeps (torchtitan's checkpointer is the model).

Each file is a dict that `torch.load(path, weights_only=True)` opens; its "model" is the plain
model's state dict (no `module.` prefix). Rank 0 writes one atomically, reports it, and rotates
the old ones out down to `keep_last` plus the best.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch
from pydantic import BaseModel

from trainjobs.contract.checkpoints import checkpoint_id, checkpoint_path, is_checkpoint_of
from trainjobs.contract.clock import utcnow
from trainjobs.contract.code import sha256_of_file
from trainjobs.contract.events import CheckpointRecord, CheckpointRemoved
from trainjobs.store import CheckpointStore

FORMAT_VERSION = 1


@dataclass(frozen=True)
class StoredObject:
    size_bytes: int
    sha256: str


class CheckpointStorage(Protocol):
    """Where checkpoint files live, addressed by a path relative to the store's root. `write`
    returns only once the object is complete: a reader never sees half of one."""

    def write(self, relative: str, state: dict[str, Any]) -> StoredObject: ...
    def delete(self, relative: str) -> None: ...
    def load(self, relative: str) -> dict[str, Any]: ...


class StoreStorage:
    """Checkpoints in the job's checkpoint store (trainjobs.store): a local directory or an
    object store. A file is written and hashed locally first and put in place whole, so a
    checkpoint is reported only once its object is complete, and an interrupted write leaves
    neither an object nor a record."""

    def __init__(self, store: CheckpointStore):
        self.store = store

    def write(self, relative: str, state: dict[str, Any]) -> StoredObject:
        spooled = self.store.spool_for(relative)
        try:
            torch.save(state, spooled)
            with open(spooled, "rb+") as file:
                os.fsync(file.fileno())
            stored = StoredObject(size_bytes=spooled.stat().st_size, sha256=sha256_of_file(spooled))
            self.store.put(spooled, relative)
        finally:
            spooled.unlink(missing_ok=True)
        return stored

    def delete(self, relative: str) -> None:
        self.store.delete(relative)

    def load(self, relative: str) -> dict[str, Any]:
        with self.store.open(relative) as file:
            return torch.load(file, map_location="cpu", weights_only=True)


def storage_at(location: str | Path) -> StoreStorage:
    """The checkpoint storage at a local path or a store URL."""
    return StoreStorage(CheckpointStore(str(location)))


def to_remove(kept: list[CheckpointRecord], keep_last: int, best_id: str | None) -> list[CheckpointRecord]:
    """The checkpoints past the newest `keep_last`, except the best."""
    newest = sorted(kept, key=lambda record: (record.epoch, record.step))[-keep_last:]
    keep = {record.id for record in newest} | ({best_id} if best_id else set())
    return [record for record in kept if record.id not in keep]


class Checkpointer:
    """A job's checkpoints: writing, the kept list, the best one, rotation, and reporting each
    change (`report`: the run's event reporter)."""

    def __init__(
        self,
        storage: CheckpointStorage,
        job_id: str,
        attempt: int,
        keep_last: int,
        report: Callable[[BaseModel], None] | None,
    ):
        self.storage = storage
        self.job_id = job_id
        self.attempt = attempt
        self.keep_last = keep_last
        self.report = report  # rank 0's reporter; other ranks never save
        self.kept: list[CheckpointRecord] = []
        self.best_id: str | None = None

    def save(
        self, epoch: int, state: dict[str, Any], is_best: bool, step: int = 0, objective: float | None = None
    ) -> CheckpointRecord:
        """Write the checkpoint after `epoch` epochs and `step` optimizer steps into the next
        (`state`: the trainer's, this object's included; `objective`: the epoch's value of the
        spec's objective), report it, and rotate old ones out."""
        assert self.report is not None, "only rank 0 saves checkpoints"
        checkpoint = checkpoint_id(self.job_id, epoch, step)
        relative = checkpoint_path(self.job_id, checkpoint, self.attempt)
        stored = self.storage.write(relative, {"format_version": FORMAT_VERSION, **state})
        record = CheckpointRecord(
            id=checkpoint,
            epoch=epoch,
            step=step,
            size_bytes=stored.size_bytes,
            sha256=stored.sha256,
            is_best=is_best,
            objective=objective,
            created_at=utcnow(),
            path=relative,
        )
        self.kept.append(record)
        if is_best:
            self.best_id = record.id
        self.report(record)  # with is_best, the collector un-marks the previous best
        for old in to_remove(self.kept, self.keep_last, self.best_id):
            self.storage.delete(old.path)
            self.kept.remove(old)
            self.report(CheckpointRemoved(id=old.id))
        return record

    def load(self, relative: str) -> dict[str, Any]:
        return self.storage.load(relative)

    def state_dict(self) -> dict[str, Any]:
        # In a checkpoint file: the kept list as it stood before that file was written.
        return {
            "kept_checkpoints": [record.model_dump(mode="json") for record in self.kept],
            "best_checkpoint_id": self.best_id,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # Rotation only ever touches this job's own files: a resume into a new job (resume_from
        # another job's checkpoint) starts with none kept and leaves the source job's files alone.
        self.kept = [
            CheckpointRecord.model_validate(record)
            for record in state["kept_checkpoints"]
            if is_checkpoint_of(record["id"], self.job_id)
        ]
        best = state["best_checkpoint_id"]
        self.best_id = best if best and is_checkpoint_of(best, self.job_id) else None
