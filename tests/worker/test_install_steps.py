"""A code job's requirements.txt, installed the way a hostile one cannot exploit: environments
never shared between archives that would build different bytes, the archive's own build code run
without the host's network, pip's output bounded, and a build that plants a link refused. Real
pip, the real sandbox (where this host has one)."""

import socket

import pytest

from devstack import archive_of, wheel
from tests.worker.test_code_cache import cache_of, uploaded
from trainjobs.store import CheckpointStore
from trainjobs.worker.code_cache import PIP_LOG_BYTES, CodeFailed
from trainjobs.worker.sandbox import unavailable_because


@pytest.fixture
def store(tmp_path):
    return CheckpointStore(str(tmp_path / "store"))


sandboxed = pytest.mark.skipif(unavailable_because() is not None, reason=f"no sandbox: {unavailable_because()}")


def _source_tree(setup_py: str, name: str = "probe") -> dict[str, str]:
    """A folder ./probe of the archive that builds with setuptools, running `setup_py` first."""
    return {
        f"{name}/setup.py": setup_py
        + f"\nfrom setuptools import setup\nsetup(name='{name}', version='1.0', py_modules=['{name}'])\n",
        f"{name}/{name}.py": "WRITTEN_BY = 'the archive'\n",
        "requirements.txt": f"./{name}\n",
    }


def test_another_archive_s_wheel_of_the_same_name_and_version_gets_its_own_environment(tmp_path, store):
    cache = cache_of(tmp_path, store)
    requirements = "./wheels/tjextra-1.0-py3-none-any.whl\n"
    seen = []
    for answer in (42, 7):  # two owners, the same requirements.txt, their own wheel's bytes
        name, wheel_bytes = wheel("tjextra", "1.0", f"ANSWER = {answer}\n")
        code = uploaded(store, archive_of({f"wheels/{name}": wheel_bytes, "requirements.txt": requirements}))
        with cache.prepared(code, tmp_path / f"{answer}.log") as prepared:
            assert prepared.installed_now
            seen.append((prepared.packages / "tjextra.py").read_text())
    assert seen == ["ANSWER = 42\n", "ANSWER = 7\n"]


@sandboxed
def test_the_archive_s_build_code_runs_without_the_host_s_network(tmp_path, store):
    listening = socket.create_server(("127.0.0.1", 0))  # a loopback service of the host (Redis, say)
    port = listening.getsockname()[1]
    probe = f"""
import socket
try:
    socket.create_connection(("127.0.0.1", {port}), timeout=3).close()
    reached = "yes"
except OSError as error:
    reached = "no: " + type(error).__name__
open("probe.py", "w").write(f"REACHED = {{reached!r}}\\n")
"""
    code = uploaded(store, archive_of(_source_tree(probe)))
    with listening, cache_of(tmp_path, store).prepared(code, tmp_path / "s.log") as prepared:
        built = (prepared.packages / "probe.py").read_text()
    assert built.startswith("REACHED = 'no: "), built


def test_a_build_that_floods_its_output_leaves_a_bounded_log_with_its_first_and_last_lines(tmp_path, store):
    flood = """
import sys
for line in range(100_000):
    print(f"flood line {line} " + "x" * 60, file=sys.stderr)
print("the flood ends here", file=sys.stderr)
sys.exit(3)
"""
    code = uploaded(store, archive_of(_source_tree(flood)))
    with (
        pytest.raises(CodeFailed, match="did not install"),
        cache_of(tmp_path, store).prepared(code, tmp_path / "s.log"),
    ):
        pass
    log = (tmp_path / "s.log").read_text()
    assert len(log.encode()) < 3 * PIP_LOG_BYTES  # of some 7 MB printed
    assert log.startswith("[trainjobs] installing requirements.txt")
    assert "bytes of this output left out" in log
    assert "the flood ends here" in log or "exit code: 3" in log  # pip's own summary comes last


@sandboxed
def test_a_build_that_makes_site_packages_a_link_is_refused(tmp_path, store):
    planted = """
import glob, os, sys
env = os.path.dirname(os.path.dirname(sys.executable))
site = glob.glob(env + "/lib/python3*/site-packages")[0]
elsewhere = env + "/elsewhere"
if not os.path.islink(site):  # setuptools runs setup.py once per build hook
    os.rename(site, elsewhere)
    os.symlink(elsewhere, site)  # a hostile build points it at "/" instead
"""
    code = uploaded(store, archive_of(_source_tree(planted)))
    with (
        pytest.raises(CodeFailed, match="site-packages a link"),
        cache_of(tmp_path, store).prepared(code, tmp_path / "s.log"),
    ):
        pass
    assert not any((tmp_path / "cache" / "environments").iterdir())
