"""Files a dataset reads must lie under TRAINJOBS_DATA_ROOT, symlinks resolved."""

from __future__ import annotations

from pathlib import Path


def confined(path: Path, data_root: Path) -> Path:
    """`path` (found inside a dataset's folder) with its symlinks resolved, refused when that
    leads outside TRAINJOBS_DATA_ROOT: a symlinked file or sub-folder must not reach past it."""
    root = data_root.resolve()
    resolved = path.resolve()
    if not resolved.is_relative_to(root):
        raise PermissionError(f"{path.name!r} in the dataset resolves outside TRAINJOBS_DATA_ROOT")
    return resolved


def inside_data_root(data_root: Path, relative: str) -> Path:
    root = data_root.resolve()
    path = (root / relative).resolve()
    if not path.is_relative_to(root):
        raise PermissionError(f"{relative!r} resolves outside TRAINJOBS_DATA_ROOT")
    if not path.exists():
        raise FileNotFoundError(f"{relative!r} does not exist under TRAINJOBS_DATA_ROOT")
    return path
