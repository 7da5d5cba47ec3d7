"""A worker's cache of jobs' code: each archive fetched, checked and unpacked once, however many
jobs want it at once; requirements installed once per distinct file, by pip in a sandbox; the
whole kept within its bound, least recently used out first, never one a job holds."""

import hashlib
import io
import logging
import os
import subprocess
import threading

import pytest

from devstack import archive_of, member, wheel
from trainjobs.contract.code import code_id, stored_path
from trainjobs.store import CheckpointStore
from trainjobs.worker.code_cache import CodeCache, CodeFailed
from trainjobs.worker.sandbox import SandboxUsers, unavailable_because

UNPACKED_LIMIT = 1 << 20


@pytest.fixture
def store(tmp_path):
    return CheckpointStore(str(tmp_path / "store"))


def cache_of(tmp_path, store, max_bytes=1 << 30) -> CodeCache:
    users = None if unavailable_because() else SandboxUsers(tmp_path / "users")
    return CodeCache(tmp_path / "cache", store, max_bytes, UNPACKED_LIMIT, users)


def uploaded(store: CheckpointStore, archive: bytes) -> str:
    code = code_id(hashlib.sha256(archive).hexdigest())
    store.put_stream(io.BytesIO(archive), stored_path(code))
    return code


def test_jobs_racing_for_a_new_archive_unpack_it_once(tmp_path, store, caplog):
    cache = cache_of(tmp_path, store)
    code = uploaded(store, archive_of({"pkg/model.py": "x = 1\n"}))
    seen, start = [], threading.Barrier(4)

    def job():
        start.wait()
        with cache.prepared(code, tmp_path / f"setup-{threading.get_ident()}.log") as prepared:
            seen.append(prepared.archive)

    with caplog.at_level(logging.INFO, logger="trainjobs.worker.code_cache"):
        threads = [threading.Thread(target=job) for _ in range(4)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    assert len(seen) == 4 and len(set(seen)) == 1
    assert (seen[0] / "pkg/model.py").read_text() == "x = 1\n"
    assert sum("unpacked" in record.message for record in caplog.records) == 1


def test_the_cache_keeps_within_its_bound_and_never_drops_what_a_job_holds(tmp_path, store):
    archives = [uploaded(store, archive_of({f"pkg/blob{index}.bin": bytes([index]) * 40_000})) for index in range(3)]
    cache = cache_of(tmp_path, store, max_bytes=90_000)  # two of them fit
    with cache.prepared(archives[0], tmp_path / "a.log") as held:
        for code in archives[1:]:
            with cache.prepared(code, tmp_path / "b.log"):
                pass
        assert held.archive.is_dir()  # the job still running on it keeps it
    with cache.prepared(archives[2], tmp_path / "c.log"):
        pass
    kept = sorted(path.name for path in (tmp_path / "cache" / "archives").iterdir())
    assert archives[1].removeprefix("sha256:") not in kept  # the least recently used went
    total = sum(path.stat().st_size for path in (tmp_path / "cache" / "archives").rglob("*") if path.is_file())
    assert total <= 90_000


def test_an_archive_whose_bytes_are_not_the_ones_named_is_refused(tmp_path, store):
    code = uploaded(store, archive_of({"pkg/model.py": "x = 1\n"}))
    store.put_stream(io.BytesIO(archive_of({"pkg/model.py": "import os\n"})), stored_path(code))
    with (
        pytest.raises(CodeFailed, match="sha256 differs"),
        cache_of(tmp_path, store).prepared(code, tmp_path / "s.log"),
    ):
        pass


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (member("../../etc/evil", size=1), r"\.\./\.\./etc/evil"),
        # 1,500 nested folders once raised RecursionError here, leaving the unpack behind
        (member("d/" * 300 + "x.py", size=1), "deeper than 64 folders"),
    ],
)
def test_an_unsafe_archive_that_reached_the_store_another_way_is_refused_by_name(tmp_path, store, bad, named):
    code = uploaded(store, archive_of({"pkg/model.py": "x = 1\n"}, extra=[bad]))
    with (
        pytest.raises(CodeFailed, match=named),
        cache_of(tmp_path, store).prepared(code, tmp_path / "s.log"),
    ):
        pass
    assert not any((tmp_path / "cache" / "archives").iterdir())


@pytest.mark.skipif(os.geteuid() != 0, reason="mounts a small tmpfs: needs root")
def test_an_unpack_that_fills_the_disk_leaves_nothing_half_unpacked(tmp_path, store):
    """A full disk is the host's failure, not the archive's: raised as it is (the job is retried
    elsewhere), with the partial unpack removed."""
    cache = tmp_path / "cache"
    cache.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", str(cache)], check=True)
    try:
        code = uploaded(store, archive_of({f"pkg/{index}.bin": bytes(1 << 20) for index in range(3)}))
        roomy = CodeCache(cache, store, 1 << 30, max_unpacked_bytes=8 << 20, sandbox_users=None)
        with pytest.raises(OSError, match="No space left"), roomy.prepared(code, tmp_path / "s.log"):
            pass
        assert list((cache / "archives").iterdir()) == []
        assert list((cache / "downloads").iterdir()) == []
    finally:
        subprocess.run(["umount", str(cache)], check=True)


def _with_requirements(requirements: str, model: str = "x = 1\n") -> bytes:
    name, wheel_bytes = wheel("tjextra", "1.0", "ANSWER = 42\n")
    return archive_of({"pkg/model.py": model, f"wheels/{name}": wheel_bytes, "requirements.txt": requirements})


def test_requirements_install_once_for_each_distinct_file(tmp_path, store):
    cache = cache_of(tmp_path, store)
    requirements = "./wheels/tjextra-1.0-py3-none-any.whl\n"
    first = uploaded(store, _with_requirements(requirements))
    with cache.prepared(first, tmp_path / "first.log") as prepared:
        assert prepared.installed_now
        assert (prepared.packages / "tjextra.py").read_text() == "ANSWER = 42\n"
        packages = prepared.packages
    assert "Successfully installed tjextra-1.0" in (tmp_path / "first.log").read_text()
    again = uploaded(store, _with_requirements(requirements, model="x = 2\n"))  # new code, same requirements
    with cache.prepared(again, tmp_path / "again.log") as prepared:
        assert not prepared.installed_now
        assert prepared.packages == packages
    assert not (tmp_path / "again.log").exists()  # pip never ran


def test_a_requirement_that_does_not_install_fails_naming_it(tmp_path, store):
    code = uploaded(store, _with_requirements("./wheels/tjmissing-2.0-py3-none-any.whl\n"))
    refused = pytest.raises(CodeFailed, match=r"No such file or directory: .\./wheels/tjmissing-2.0-py3-none-any.whl")
    with refused, cache_of(tmp_path, store).prepared(code, tmp_path / "s.log"):
        pass
    assert not any((tmp_path / "cache" / "environments").iterdir())
