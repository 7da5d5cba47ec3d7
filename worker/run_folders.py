"""Old attempts' folders on a worker (`<run dir>/<job>/attempt<N>`: its launcher's and ranks'
logs): removed once nothing in them has changed for TRAINJOBS_RUN_FOLDERS_KEEP_DAYS. The service
keeps a job's logs in SQL; these copies are for whoever debugs on the host, for a while. Each
attempt folder holds its ranks' folder (`ranks/`, theirs): walked and removed without following
a link or recursing, and its times in the future ignored."""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from trainjobs.worker.rank_files import RANKS_FOLDER, rank_file_stats, remove_rank_tree

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
            if attempt.name.startswith(ATTEMPT_PREFIX) and now - _last_change(attempt, now) > keep_seconds:
                try:
                    remove_rank_tree(attempt)
                except OSError as error:
                    log.warning("could not remove %s: %s", attempt, error)
                    continue
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


def _last_change(folder: Path, now: float) -> float:
    """The newest time a file under `folder` changed. The ranks' files (`ranks/`) are theirs,
    times too: one in the future is ignored, or a job could keep its folder for ever."""
    newest = folder.lstat().st_mtime
    for stats in rank_file_stats(folder / RANKS_FOLDER):
        if stats.st_mtime <= now:
            newest = max(newest, stats.st_mtime)
    for entry in _entries(folder):
        if entry.name != RANKS_FOLDER:
            newest = max([newest, *(stats.st_mtime for stats in _stats_under(entry))])
    return newest


def _entries(folder: Path) -> list[os.DirEntry]:
    try:
        return list(os.scandir(folder))
    except OSError:
        return []


def _stats_under(entry: os.DirEntry) -> list[os.stat_result]:
    try:
        if entry.is_dir(follow_symlinks=False):
            return [*rank_file_stats(Path(entry.path)), entry.stat(follow_symlinks=False)]
        return [entry.stat(follow_symlinks=False)]
    except OSError:
        return []
