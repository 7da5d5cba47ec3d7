"""Process supervision: start a job attempt's launcher, wait on it, end its whole process group.

The launcher runs in a session of its own, so that cancel, timeout and a lost lease end the
launcher, its ranks and their data-loader workers as one process group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

from trainjobs.contract.run import RunRequest

TERMINATE_GRACE_SECONDS = 5.0


def start_launcher(request: RunRequest) -> subprocess.Popen[bytes]:
    """Write the run request next to the attempt's logs and start `trainjobs.worker.launcher` on it."""
    request_file = request.run_path / "request.json"
    request_file.write_text(request.model_dump_json())
    env = dict(os.environ)
    if request.devices:
        # The launcher sees the job's GPUs only; each rank narrows that to its own.
        env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, request.devices))
    with open(request.run_path / "launcher.log", "ab") as launcher_log:
        return subprocess.Popen(
            [sys.executable, "-m", "trainjobs.worker.launcher", str(request_file), str(os.getpid())],
            stdout=launcher_log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def has_exited(launcher: subprocess.Popen[bytes], within_seconds: float) -> bool:
    try:
        launcher.wait(timeout=within_seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def wait_or_end(launcher: subprocess.Popen[bytes], seconds: float = TERMINATE_GRACE_SECONDS) -> None:
    """Let a launcher that is finishing exit by itself; end its group if it does not in time."""
    if not has_exited(launcher, seconds):
        end_process_group(launcher)


def end_process_group(launcher: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the launcher's whole group, SIGKILL to what is left after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(launcher.pid, sig)
        except ProcessLookupError:
            return
        if not has_exited(launcher, TERMINATE_GRACE_SECONDS):
            continue
        # The launcher is gone; its ranks may linger a moment in the same group.
        deadline = time.monotonic() + TERMINATE_GRACE_SECONDS
        while time.monotonic() < deadline and _group_alive(launcher.pid):
            time.sleep(0.1)
        if not _group_alive(launcher.pid):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False
