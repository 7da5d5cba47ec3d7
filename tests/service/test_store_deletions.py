"""Checkpoint store deletions recorded with the rows' removal and tried again until the store says
the file is gone (service/store_deletions.py), on real SQLite and PostgreSQL and a real local
store that fails: a small tmpfs remounted read-only, then writable again."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from sqlalchemy import update

from devstack import job_sessions
from trainjobs.contract.clock import utcnow
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import store_deletions as deletions_table
from trainjobs.jobs.tables import StoreDeletionRow
from trainjobs.service import store_deletions
from trainjobs.store import CheckpointStore


@pytest.fixture
def sessions(database_url, namespace):
    return job_sessions(database_url, namespace)


@pytest.fixture
def small_disk(tmp_path):
    """A tmpfs of its own, which the test can make read-only (root only)."""
    folder = tmp_path / "store"
    folder.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    yield folder
    subprocess.run(["umount", "-l", str(folder)], capture_output=True)


def remount(folder: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(folder)], check=True)


def due_now(sessions) -> None:
    """As if the wait before the next try had passed."""
    with transaction(sessions) as session:
        session.execute(update(StoreDeletionRow).values(next_try_at=utcnow()))


def pending(sessions) -> list[tuple[str, int]]:
    with transaction(sessions) as session:
        return [(row.path, row.tries) for row in deletions_table.pending(session)]


def test_a_delete_the_store_refused_is_tried_again_until_the_file_is_gone(sessions, small_disk):
    store = CheckpointStore(str(small_disk))
    stored = small_disk / "j1" / "a1" / "j1-e0001.pt"
    stored.parent.mkdir(parents=True)
    stored.write_bytes(b"weights")
    remount(small_disk, "ro")
    try:
        with transaction(sessions) as session:  # the transaction that removed the checkpoint's row
            store_deletions.record(session, ["j1/a1/j1-e0001.pt"])
        store_deletions.delete_now(store, ["j1/a1/j1-e0001.pt"])
        due_now(sessions)
        assert store_deletions.sweep(sessions, store) == 0
        assert stored.exists() and pending(sessions) == [("j1/a1/j1-e0001.pt", 1)]
    finally:
        remount(small_disk, "rw")
    assert store_deletions.sweep(sessions, store) == 0  # not due yet: it waits before the next try
    due_now(sessions)
    assert store_deletions.sweep(sessions, store) == 1
    assert not stored.exists() and pending(sessions) == []


def test_a_deleted_job_s_folder_goes_and_its_record_with_it(sessions, tmp_path):
    store = CheckpointStore(str(tmp_path / "store"))
    (tmp_path / "store" / "j2" / "a1").mkdir(parents=True)
    (tmp_path / "store" / "j2" / "a1" / "j2-e0001.pt").write_bytes(b"weights")
    with transaction(sessions) as session:
        store_deletions.record(session, ["j2"], tree=True)
    store_deletions.delete_now(store, ["j2"], tree=True)
    assert not (tmp_path / "store" / "j2").exists()
    due_now(sessions)
    assert store_deletions.sweep(sessions, store) == 1  # gone already: no error, the record goes
    assert pending(sessions) == []
