"""A worker's old attempt folders go; recent ones, and what is not an attempt's, stay."""

from __future__ import annotations

import os
import time

import pytest

from trainjobs.worker.launcher import folder_bytes
from trainjobs.worker.rank_files import remove_rank_tree
from trainjobs.worker.run_folders import remove_old

DAY = 86400


def attempt_folder(run_path, job: str, attempt: int, age_days: float):
    folder = run_path / job / f"attempt{attempt}"
    folder.mkdir(parents=True)
    log = folder / "launcher.log"
    log.write_text("done\n")
    then = time.time() - age_days * DAY
    for path in (log, folder):
        os.utime(path, (then, then))
    return folder


def test_attempt_folders_untouched_for_the_keep_time_are_removed_and_the_rest_kept(tmp_path):
    old = attempt_folder(tmp_path, "jold", 1, age_days=10)
    recent = attempt_folder(tmp_path, "jnew", 1, age_days=1)
    older_attempt = attempt_folder(tmp_path, "jboth", 1, age_days=10)
    running = attempt_folder(tmp_path, "jboth", 2, age_days=10)
    (running / "rank0.log").write_text("still writing\n")  # written just now
    (tmp_path / "slots" / "jx-a1").mkdir(parents=True)  # not an attempt folder

    assert remove_old(tmp_path, keep_seconds=7 * DAY) == 2
    assert not old.exists() and not (tmp_path / "jold").exists()
    assert recent.exists() and running.exists() and not older_attempt.exists()
    assert (tmp_path / "slots" / "jx-a1").exists()


def test_times_in_the_future_in_the_ranks_folder_do_not_keep_an_attempt_for_ever(tmp_path):
    old = attempt_folder(tmp_path, "jold", 1, age_days=10)
    planted = old / "ranks" / "deep" / "forever.txt"
    planted.parent.mkdir(parents=True)
    planted.write_text("x")
    future = time.time() + 365 * DAY
    os.utime(planted, (future, future))
    for folder in (planted.parent, planted.parent.parent):
        os.utime(folder, (future, future))
    then = time.time() - 10 * DAY
    os.utime(old, (then, then))

    assert remove_old(tmp_path, keep_seconds=7 * DAY) == 1
    assert not old.exists()


@pytest.fixture
def removed_after(tmp_path):
    """tmp_path, and whatever of it is left emptied without recursion (pytest's own clean-up
    recurses: it cannot remove a tree thousands deep)."""
    yield tmp_path
    for leftover in tmp_path.iterdir():
        if leftover.is_dir():
            remove_rank_tree(leftover)


def test_a_ranks_folder_nested_thousands_deep_is_measured_and_removed(removed_after):
    """A rank may nest folders past Python's recursion limit and PATH_MAX; nothing of the
    launcher's or the worker's that walks or removes the ranks' folder recurses or fails on it."""
    tmp_path = removed_after
    old = attempt_folder(tmp_path, "jdeep", 1, age_days=10)
    (old / "ranks").mkdir()
    directory = os.open(old / "ranks", os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(3000):  # 3,000 levels: 9,000 bytes of path
        os.mkdir("abc", dir_fd=directory)
        inner = os.open("abc", os.O_RDONLY | os.O_DIRECTORY, dir_fd=directory)
        os.close(directory)
        directory = inner
    with os.fdopen(os.open("leaf.bin", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=directory), "wb") as leaf:
        leaf.write(b"x" * 1000)
    os.symlink("/etc/passwd", "link", dir_fd=directory)
    os.close(directory)

    assert folder_bytes(old / "ranks") == 1000 + len("/etc/passwd")  # the file and the link itself
    assert remove_old(tmp_path, keep_seconds=7 * DAY, now=time.time() + 8 * DAY) == 1
    assert not old.exists() and os.path.exists("/etc/passwd")
