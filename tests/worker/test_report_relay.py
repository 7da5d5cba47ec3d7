"""The launcher's end of rank 0's channel treats the ranks' folder as hostile: a checkpoint
handed over is stored and its local file removed, but a rank that makes `checkpoints/` a link
never makes the launcher (root, outside the sandbox) read or delete what the link points to."""

import hashlib
import threading
import time
from datetime import UTC, datetime

import pytest

from trainjobs.contract.checkpoints import checkpoint_id, checkpoint_path
from trainjobs.contract.events import CheckpointRecord, CheckpointRemoved
from trainjobs.store import CheckpointStore
from trainjobs.worker.report_relay import ReportRelay
from trainjobs.worker.trainer.handoff import LauncherChannel

JOB, ATTEMPT = "j-relay", 1


@pytest.fixture
def relayed(tmp_path):
    """A relay on a ranks' folder, what it sent on, and the channel rank 0 would hold."""
    rank_dir = tmp_path / "ranks"
    rank_dir.mkdir()
    sent, lock = [], threading.Lock()

    def send(payload):
        with lock:
            sent.append(payload)

    store = CheckpointStore(str(tmp_path / "store"))
    relay = ReportRelay(tmp_path / "channel.sock", rank_dir, send, store, JOB, ATTEMPT).start()
    channel = LauncherChannel(str(tmp_path / "channel.sock"))
    yield rank_dir, store, relay, channel, sent
    channel.socket.close()
    relay.finish(timeout=10)


def record_of(name: str, data: bytes) -> CheckpointRecord:
    return CheckpointRecord(
        id=name,
        epoch=1,
        size_bytes=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        is_best=False,
        created_at=datetime.now(UTC),
        path=checkpoint_path(JOB, name, ATTEMPT),
    )


def settled(relay: ReportRelay, count: int) -> None:
    deadline = time.monotonic() + 10
    while relay.relayed < count and time.monotonic() < deadline:
        time.sleep(0.02)


def test_a_checkpoint_handed_over_is_stored_and_its_local_file_removed(relayed):
    rank_dir, store, relay, channel, sent = relayed
    name = checkpoint_id(JOB, 1)
    (rank_dir / "checkpoints").mkdir()
    (rank_dir / "checkpoints" / f"{name}.pt").write_bytes(b"weights")
    channel.send(record_of(name, b"weights"))
    settled(relay, 1)
    assert [type(payload) for payload in sent] == [CheckpointRecord]
    assert store.size(checkpoint_path(JOB, name, ATTEMPT)) == len(b"weights")
    assert not (rank_dir / "checkpoints" / f"{name}.pt").exists()


def test_a_checkpoints_folder_that_is_a_link_is_never_followed_to_delete(relayed, tmp_path):
    """The rank points `checkpoints/` at a folder it cannot write (another owner's files, the
    data root) and reports the rotation of a checkpoint named as a file there."""
    rank_dir, _store, relay, channel, sent = relayed
    name = checkpoint_id(JOB, 2)
    victims = tmp_path / "another-owner"
    victims.mkdir()
    (victims / f"{name}.pt").write_bytes(b"someone else's weights")
    (rank_dir / "checkpoints").symlink_to(victims)

    channel.send(CheckpointRemoved(id=name))
    channel.send(record_of(name, b"someone else's weights"))  # nor read it to store it
    settled(relay, 1)
    time.sleep(0.2)  # the record, dropped, would have come next

    assert (victims / f"{name}.pt").read_bytes() == b"someone else's weights"
    assert [type(payload) for payload in sent] == [CheckpointRemoved]
