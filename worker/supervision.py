"""Process supervision: start a job attempt's launcher, wait on it, end its whole process group.

The launcher runs in a session of its own, so that cancel, timeout and a lost lease end the
launcher, its fork server, its ranks and their data-loader workers as one process group.

Launchers are started ahead of their job (`LauncherPool`): a launcher spends its first seconds
importing torch and starting a fork server that preloads the trainer (trainjobs.worker.launcher),
then waits for the path of its run request on stdin. The pool keeps `ready` of them waiting, so a
job that arrives at an idle worker starts without that cost; a job that finds none waiting takes
a launcher started for it, which is what a cold start costs. Each launcher serves one attempt.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from trainjobs.contract.run import RunRequest

log = logging.getLogger(__name__)
STOP_SIGNAL = signal.SIGUSR1  # worker -> launcher -> ranks: checkpoint at the next step and stop (a preemption)

TERMINATE_GRACE_SECONDS = 5.0
HANDOVER_TRIES = 3  # a launcher that dies as it is handed a job is replaced, but not without end


@dataclass(frozen=True)
class SandboxOptions:
    """How a worker's launchers sandbox their ranks (trainjobs.worker.sandbox)."""

    slots: Path  # where each launcher makes its slot
    data_root: Path
    max_processes: int
    max_file_bytes: int
    device_root: Path = Path("/dev")  # where the GPUs' device nodes are (trainjobs.worker.gpu_nodes)
    driver_proc: Path = Path("/proc/driver/nvidia")

    def arguments(self, host_network: bool) -> list[str]:
        return [
            f"--slots={self.slots}",
            f"--data-root={self.data_root}",
            f"--device-root={self.device_root}",
            f"--driver-proc={self.driver_proc}",
            f"--max-processes={self.max_processes}",
            f"--max-file-bytes={self.max_file_bytes}",
            *(["--host-network"] if host_network else []),
        ]


class LauncherPool:
    """Launchers waiting for their job, `ready` of them at most (0: each is started with its job).
    Their output goes to `log_path` until they are given a job (then to its launcher.log). With a
    `sandbox`, each runs its ranks in one; a waiting launcher's sandbox has no network but
    loopback, so a multi-node job (whose ranks reach their peers) gets a launcher started for it."""

    def __init__(self, log_path: Path, ready: int, sandbox: SandboxOptions | None = None):
        self.log_path = log_path
        self.ready = ready
        self.sandbox = sandbox
        self._waiting: list[subprocess.Popen[bytes]] = []
        self._lock = threading.Lock()

    def start_launcher(self, request: RunRequest) -> subprocess.Popen[bytes]:
        """Write the run request next to the attempt's logs and hand it to a waiting launcher
        (one that died while it waited is replaced), or to one started now."""
        request_file = request.run_path / "request.json"
        request_file.write_text(request.model_dump_json())
        host_network = request.nodes > 1
        for _ in range(HANDOVER_TRIES):
            launcher = (None if host_network else self._take()) or self._start(host_network)
            try:
                assert launcher.stdin is not None
                launcher.stdin.write(f"{request_file}\n".encode())
                launcher.stdin.close()
                return launcher
            except (BrokenPipeError, OSError):  # it died between our look and the write
                launcher.wait()
        raise RuntimeError(f"no launcher took the request in {HANDOVER_TRIES} tries; see {self.log_path}")

    def replenish(self) -> None:
        """Start launchers until `ready` wait (at worker start, and when a job has ended: not
        while a job starts, whose ranks want the cores)."""
        with self._lock:
            self._waiting = [launcher for launcher in self._waiting if launcher.poll() is None]
            while len(self._waiting) < self.ready:
                self._waiting.append(self._start())

    def close(self) -> None:
        """End the waiting launchers (each exits when its stdin closes)."""
        with self._lock:
            waiting, self._waiting = self._waiting, []
        for launcher in waiting:
            if launcher.stdin is not None:
                launcher.stdin.close()
            wait_or_end(launcher)

    def _take(self) -> subprocess.Popen[bytes] | None:
        with self._lock:
            while self._waiting:
                launcher = self._waiting.pop(0)
                if launcher.poll() is None:
                    return launcher
                log.warning(
                    "a waiting launcher (pid %d) had exited (%s); using another", launcher.pid, launcher.returncode
                )
        return None

    def _start(self, host_network: bool = False) -> subprocess.Popen[bytes]:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        sandbox = self.sandbox.arguments(host_network) if self.sandbox else []
        # The stop signal is blocked in the launcher from its start (a child inherits the forking
        # thread's mask) until its handler is in place: a preemption that comes while it still
        # imports waits for it instead of ending it (the signal's default action).
        unblocked = signal.pthread_sigmask(signal.SIG_BLOCK, {STOP_SIGNAL})
        try:
            with open(self.log_path, "ab") as launcher_log:
                return subprocess.Popen(
                    # -P: nothing of the worker's working directory on the import path (a folder
                    # named trainjobs or torch there would shadow the installed packages).
                    [sys.executable, "-P", "-m", "trainjobs.worker.launcher", "--parent", str(os.getpid()), *sandbox],
                    stdin=subprocess.PIPE,
                    stdout=launcher_log,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                    env=launcher_environment(),
                )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, unblocked)


def launcher_environment() -> dict[str, str]:
    """The worker's environment without its own settings: a launcher is given all it needs in its
    request, and its ranks (unsandboxed, they inherit it) must not find the database URL."""
    kept = {name: value for name, value in os.environ.items() if not name.startswith("TRAINJOBS_")}
    return kept | {"PYTHONSAFEPATH": "1"}  # and so for the fork server and unsandboxed ranks


def has_exited(launcher: subprocess.Popen[bytes], within_seconds: float) -> bool:
    try:
        launcher.wait(timeout=within_seconds)
        return True
    except subprocess.TimeoutExpired:
        return False


def on_exit(process: subprocess.Popen[bytes], callback: Callable[[], None]) -> None:
    """Call `callback`, from a thread of its own, once `process` has exited."""

    def wait_then_call() -> None:
        process.wait()
        callback()

    threading.Thread(target=wait_then_call, name=f"trainjobs-wait-{process.pid}", daemon=True).start()


def wait_or_end(launcher: subprocess.Popen[bytes], seconds: float = TERMINATE_GRACE_SECONDS) -> None:
    """Let a launcher that is finishing exit by itself; end its group if it does not in time."""
    if not has_exited(launcher, seconds):
        end_process_group(launcher)


def ask_to_stop(launcher: subprocess.Popen[bytes]) -> None:
    """Ask a launcher's ranks to checkpoint at their next optimizer step and stop."""
    try:
        os.kill(launcher.pid, STOP_SIGNAL)
    except ProcessLookupError:
        pass


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


def kill_process_group(launcher: subprocess.Popen[bytes]) -> None:
    """SIGKILL to the launcher's whole group at once, and wait (briefly) for it to be gone: for an
    attempt the job has moved past, or may have by the time a grace period ended, whose processes
    must be gone before the next attempt starts. Nothing it would do on SIGTERM counts any more.
    Ranks in a sandbox follow its bubblewrap (--die-with-parent ends its PID namespace)."""
    try:
        os.killpg(launcher.pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    has_exited(launcher, TERMINATE_GRACE_SECONDS)
    deadline = time.monotonic() + TERMINATE_GRACE_SECONDS
    while time.monotonic() < deadline and _group_alive(launcher.pid):
        time.sleep(0.05)


def _group_alive(pgid: int) -> bool:
    return bool(group_members(pgid))


def group_members(pgid: int) -> list[int]:
    """The processes of the group that still run. A zombie does not count: it holds nothing,
    and where the host's init is slow to reap orphans (some containers) one lingers for seconds."""
    members = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        state, _parent, group = stat[stat.rindex(")") + 2 :].split()[:3]
        if int(group) == pgid and state != "Z":
            members.append(int(entry))
    return members
