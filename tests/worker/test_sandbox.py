"""The sandbox a job's ranks run in, tried from inside: what its code can see, reach and use up.
Each test runs a few lines of Python in a real sandbox (bubblewrap, setpriv, prlimit)."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from devstack import REDIS_URL
from trainjobs.worker.sandbox import ENVIRONMENT, Sandbox, SandboxUsers, unavailable_because

pytestmark = pytest.mark.skipif(unavailable_because() is not None, reason=f"no sandbox: {unavailable_because()}")


@pytest.fixture
def sandbox(tmp_path):
    slot = tmp_path / "slot"
    slot.mkdir(mode=0o755)
    uid, lock = SandboxUsers(tmp_path / "users").claim()
    (slot / "mine").mkdir()
    os.chown(slot / "mine", uid, uid)
    yield Sandbox(slot, uid, data_root=tmp_path / "data", max_processes=64, max_file_bytes=1 << 20)
    os.close(lock)


def run_inside(sandbox: Sandbox, code: str, **env: str) -> subprocess.CompletedProcess:
    command = sandbox.command([sys.executable, "-c", textwrap.dedent(code)])
    return subprocess.run(command, capture_output=True, text=True, timeout=60, env={**os.environ, **env})


def test_the_environment_is_built_from_nothing(sandbox):
    done = run_inside(sandbox, "import os, json; print(json.dumps(dict(os.environ)))", TRAINJOBS_SECRET="s3cret")
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert "TRAINJOBS_SECRET" not in seen
    # PWD: bubblewrap's, the slot's path; the heap settings: the launcher's own (launcher.warm_up)
    assert set(seen) <= set(ENVIRONMENT) | {"PWD", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"}


def test_code_runs_as_its_own_user_without_privileges(sandbox):
    done = run_inside(
        sandbox,
        """
        import os
        status = dict(line.split(":", 1) for line in open("/proc/self/status"))
        print(os.getuid(), os.geteuid(), os.getgroups(), status["CapEff"].strip(), status["NoNewPrivs"].strip())
        """,
    )
    assert done.stdout.split() == [str(sandbox.uid), str(sandbox.uid), "[]", "0000000000000000", "1"]


def test_only_its_own_folder_and_a_private_tmp_can_be_written(sandbox, tmp_path):
    (tmp_path / "worker-file").write_text("the worker's")
    done = run_inside(
        sandbox,
        f"""
        import os
        def tried(action):
            try:
                action()
                return "done"
            except OSError as error:
                return type(error).__name__
        print(tried(lambda: open("{sandbox.slot}/mine/out.txt", "w").write("x")))
        print(tried(lambda: open("/tmp/scratch", "w").write("x")))
        print(tried(lambda: open("{sandbox.slot}/beside-mine", "w").write("x")))
        print(tried(lambda: open("{tmp_path}/worker-file").read()))
        print(tried(lambda: open("/usr/lib/os-release-copy", "w").write("x")))
        print(tried(lambda: open("{sandbox.data_root}/../worker-file").read()))
        print(*os.listdir("{tmp_path}"))
        """,
    )
    *outcomes, beside_slot = done.stdout.splitlines()
    assert outcomes[:4] == ["done", "done", "PermissionError", "FileNotFoundError"]
    assert outcomes[4] in ("OSError", "PermissionError")  # read-only file system, or permission
    assert outcomes[5] == "FileNotFoundError"
    assert beside_slot == "slot"  # of the worker's folder, the sandbox sees its slot alone
    assert (sandbox.slot / "mine" / "out.txt").read_text() == "x"
    assert not (tmp_path / "scratch").exists()


def test_no_process_outside_can_be_seen_or_signalled(sandbox):
    done = run_inside(
        sandbox,
        f"""
        import os
        print(sorted(int(name) for name in os.listdir("/proc") if name.isdigit()))
        try:
            os.kill({os.getpid()}, 0)
            print("reached")
        except ProcessLookupError:
            print("no-such-process")
        """,
    )
    pids, outcome = done.stdout.splitlines()
    assert len(json.loads(pids)) <= 3  # bubblewrap's init, setpriv's exec of python, python
    assert outcome == "no-such-process"


def test_a_one_node_sandbox_reaches_no_network_but_its_own_loopback(sandbox):
    port = int(REDIS_URL.rsplit(":", 1)[1].split("/")[0])
    done = run_inside(
        sandbox,
        f"""
        import socket
        for host in ("127.0.0.1", "10.255.255.1"):
            try:
                socket.create_connection((host, {port}), timeout=2).close()
                print("connected")
            except OSError as error:
                print(type(error).__name__)
        """,
    )
    assert done.stdout.split()[0] == "ConnectionRefusedError"  # its own loopback: no Redis there
    assert done.stdout.split()[1] in ("OSError", "TimeoutError")  # no route: no interface but lo


def test_forking_without_end_stops_at_the_process_bound(sandbox):
    done = run_inside(
        sandbox,
        """
        import os, time
        children = 0
        try:
            while True:
                if os.fork() == 0:
                    time.sleep(30)
                    os._exit(0)
                children += 1
        except OSError as error:
            print(children, type(error).__name__)
        """,
    )
    children, error = done.stdout.split()
    assert error == "BlockingIOError"
    assert int(children) < sandbox.max_processes


def test_the_private_tmp_is_bounded_too(sandbox):
    done = run_inside(
        sandbox,
        """
        import os
        written = 0
        try:
            for index in range(100):
                with open(f"/tmp/fill-{index}", "wb") as file:
                    file.write(b"0" * (512 << 10))
                written += 512 << 10
        except OSError as error:
            print(written, error.errno)
        """,
    )
    written, error = map(int, done.stdout.split())
    assert written <= sandbox.max_file_bytes
    assert error in (27, 28)  # EFBIG or ENOSPC: either way, bounded


def test_a_file_cannot_grow_past_the_size_bound(sandbox):
    done = run_inside(sandbox, f"open('{sandbox.slot}/mine/fill', 'wb').write(b'0' * (2 << 20))")
    # Python ignores SIGXFSZ: the write fails with EFBIG (a process that does not is killed by it)
    assert done.returncode == 1 and "File too large" in done.stderr
    assert (sandbox.slot / "mine" / "fill").stat().st_size <= sandbox.max_file_bytes


def test_the_host_pid_of_a_process_inside_is_found_from_its_pid_there(sandbox):
    """The launcher signals ranks by their pids on the host, never by the numbers their sandbox's
    fork server reports (those name other processes on the host)."""
    from trainjobs.worker.namespace_pids import host_pids

    code = "import os, time; print(os.getpid(), flush=True); time.sleep(30)"
    inside = subprocess.Popen(sandbox.command([sys.executable, "-c", code]), stdout=subprocess.PIPE, text=True)
    try:
        pid_inside = int(inside.stdout.readline())
        on_host = host_pids(inside.pid)[pid_inside]
        assert on_host != pid_inside
        assert b"time.sleep(30)" in Path(f"/proc/{on_host}/cmdline").read_bytes()
    finally:
        inside.kill()
        inside.wait()
