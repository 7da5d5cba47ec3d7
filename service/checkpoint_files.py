"""Where checkpoint files live for the API: under the checkpoint store, and nowhere else."""

from __future__ import annotations

from pathlib import Path

from trainjobs.service.errors import NotFound


def resolve_in_store(store: Path, relative: str) -> Path:
    path = (store / relative).resolve()
    if not path.is_relative_to(store.resolve()) or not path.is_file():
        raise NotFound("checkpoint file not found")
    return path
