"""The checkpoint store on a real S3-compatible server (moto's standalone server) and on a
local directory: whole objects or none, confined paths, streamed reads."""

from __future__ import annotations

import os
import secrets

import pytest

from trainjobs.store import CheckpointStore


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path, monkeypatch) -> CheckpointStore:
    if request.param == "local":
        return CheckpointStore(str(tmp_path / "store"))
    server = request.getfixturevalue("s3_server")
    for key, value in server.env.items():
        monkeypatch.setenv(key, value)
    return CheckpointStore(f"s3://{server.bucket}/{secrets.token_hex(4)}")


def test_an_object_is_put_whole_read_in_chunks_and_deleted(store):
    data = os.urandom(3 * (1 << 20) + 17)
    spooled = store.spool_for("j1/j1-e0001.pt")
    spooled.write_bytes(data)
    store.put(spooled, "j1/j1-e0001.pt")
    assert not spooled.exists()
    assert store.size("j1/j1-e0001.pt") == len(data)
    chunks = list(store.iter_bytes("j1/j1-e0001.pt"))
    assert len(chunks) == 4 and b"".join(chunks) == data
    store.delete("j1/j1-e0001.pt")
    assert store.size("j1/j1-e0001.pt") is None
    store.delete("j1/j1-e0001.pt")  # deleting what is gone is no error


@pytest.mark.parametrize("relative", ["../other/x.pt", "/etc/passwd", "a/../../x.pt", "a/./b.pt"])
def test_a_path_that_leaves_the_store_is_refused(store, relative):
    with pytest.raises(ValueError, match="not a path inside the checkpoint store"):
        store.path_of(relative)
