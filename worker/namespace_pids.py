"""The host's pids of the ranks a sandboxed fork server starts.

A sandbox has a pid namespace of its own, so the fork server inside it tells the launcher each
rank's pid as the sandbox sees it (2, 3, ...). multiprocessing (and torch's process context) signal
a rank by that number: on the host it names some other process. Once the ranks are started, the
launcher looks up each one's pid on the host (the first field of `NSpid` in /proc/<pid>/status,
whose last field is its pid inside) among the fork server's descendants, and puts it in the rank's
Popen; a rank no longer there (it exited) is never signalled."""

from __future__ import annotations

import os
from pathlib import Path


def host_pids(root: int) -> dict[int, int]:
    """{pid inside its namespace: pid on the host} of `root` and its descendants."""
    parents: dict[int, int] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:
                continue
            parents[int(entry)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    found, todo = {}, [root]
    while todo:
        pid = todo.pop()
        inner = _innermost_pid(pid)
        if inner is not None:
            found[inner] = pid
        todo.extend(child for child, parent in parents.items() if parent == pid)
    return found


def _innermost_pid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except OSError:
        pass
    return None


def use_host_pids(processes, fork_server: int) -> None:
    """Point each started rank's Popen at its pid on the host (the fork server's pid on the host:
    `fork_server`)."""
    on_host = host_pids(fork_server)
    for process in processes:
        popen = process._popen
        if popen.pid in on_host:
            popen.pid = on_host[popen.pid]
        else:  # it has exited already: nothing of ours has that number on the host
            popen._send_signal = lambda _signum: None
