"""Old attempts' folders on a worker (`<run dir>/<job>/attempt<N>`: its launcher's and ranks'
logs): removed once nothing in them has changed for TRAINJOBS_RUN_FOLDERS_KEEP_DAYS. The service
keeps a job's logs in SQL; these copies are for whoever debugs on the host, for a while."""

from __future__ import annotations

import logging
import os
import shutil
import time
from pathlib import Path

log = logging.getLogger(__name__)

ATTEMPT_PREFIX = "attempt"


def remove_old(run_path: Path, keep_seconds: float, now: float | None = None) -> int:
    """Remove the attempt folders under `run_path` untouched for `keep_seconds` (and job folders
    left empty); returns how many attempt folders went. A running attempt writes its logs, so
    its folder is never that old."""
    now = time.time() if now is None else now
    removed = 0
    for job in _folders(run_path):
        for attempt in _folders(job):
            if attempt.name.startswith(ATTEMPT_PREFIX) and now - _last_change(attempt) > keep_seconds:
                shutil.rmtree(attempt, ignore_errors=True)
                removed += 1
        try:
            job.rmdir()  # only if empty
        except OSError:
            pass
    if removed:
        log.info("removed %d attempt folder(s) untouched for %.0f days", removed, keep_seconds / 86400)
    return removed


def _folders(path: Path) -> list[Path]:
    try:
        return [Path(entry.path) for entry in os.scandir(path) if entry.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _last_change(folder: Path) -> float:
    newest = folder.lstat().st_mtime
    for root, _dirs, files in os.walk(folder):
        for name in files:
            try:
                newest = max(newest, os.lstat(os.path.join(root, name)).st_mtime)
            except OSError:
                continue
    return newest
