"""Finding a stack's processes on this machine: launchers, fork servers, ranks."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from devstack.services import wait_until


def launchers_matching(text: str) -> list[int]:
    """PIDs of launcher processes whose output file's path mentions `text` (a job id, a stack's
    home): a job's launcher writes to that attempt's launcher.log, a launcher still waiting for
    its job to its worker's launchers.log."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            output = os.readlink(entry / "fd" / "1")
        except OSError:
            continue
        if b"trainjobs.worker.launcher" in cmdline and text in output:
            found.append(int(entry.name))
    return found


def waiting_launchers(home: Path) -> list[int]:
    """Launchers a worker under `home` started ahead of their job, still waiting for it."""
    return [pid for pid in launchers_matching(str(home)) if _output(pid).endswith("launchers.log")]


def _output(pid: int) -> str:
    """Where the process's stdout goes; "" for one that is exiting (its descriptors are closed
    before it leaves /proc: a test that had just killed a launcher raced with it)."""
    try:
        return os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return ""


def descendants(pid: int) -> list[int]:
    """Every process below `pid`: a launcher's fork server, and the ranks forked from it."""
    found, frontier = [], [pid]
    while frontier:
        try:
            children = child_pids(frontier.pop())
        except OSError:
            continue
        found += children
        frontier += children
    return found


def kill_launchers_of(home: Path) -> None:
    for pid in launchers_matching(str(home)):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def processes_of_job(job_id: str) -> list[int]:
    """Every live launcher, fork server and rank of a job on this machine, whichever worker
    started them: a launcher writes to the job's launcher.log, a rank's stdout is the job's rank
    log, the fork server is its launcher's child."""
    found = set(launchers_matching(job_id))
    for launcher in list(found):
        found.update(descendants(launcher))
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"/{job_id}/" in os.readlink(entry / "fd" / "1"):
                    found.add(int(entry.name))
            except OSError:
                continue
    return sorted(pid for pid in found if pid_alive(pid))


def find_launcher(job_id: str) -> int | None:
    found = launchers_matching(job_id)
    return found[0] if found else None


def child_pids(pid: int) -> list[int]:
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(child) for child in (task / "children").read_text().split()]
    return children


def rank_pids(job_id: str, timeout: float = 15) -> dict[int, int]:
    """{rank: pid} of a running job, told by the log file each rank's stdout points at. A rank's
    data-loader workers write to that log too: a rank is the one whose parent does not (a test
    that stopped a loader worker for its rank saw the rank go on to its next step)."""

    def ranks():
        launcher = find_launcher(job_id)
        outputs = {}
        for pid in descendants(launcher) if launcher else []:
            try:
                outputs[pid] = (os.readlink(f"/proc/{pid}/fd/1"), parent_pid(pid))
            except OSError:
                continue
        found = {}
        for pid, (target, parent) in outputs.items():
            is_rank_log = "/rank" in target and target.endswith(".log")
            if is_rank_log and outputs.get(parent, ("", 0))[0] != target:
                found[int(target.rsplit("/rank", 1)[1].removesuffix(".log"))] = pid
        return found

    return wait_until(ranks, timeout, what=f"the ranks of job {job_id}")


def parent_pid(pid: int) -> int:
    # /proc/PID/stat: "pid (command) state ppid ...", where the command may hold spaces.
    return int(Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[1])


def pid_alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status
