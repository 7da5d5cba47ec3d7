"""The service's own processes give way on the CPU to the jobs that train beside them.

Why: where a job's ranks keep every core busy (a cpu job; a GPU job's data loading), each wakeup
of the API or the worker (a sweep, a lease renewal, an event to apply, a poll) takes a core from a
rank, and with two or more ranks the others then wait for that one at the next all-reduce. At
`TRAINJOBS_SERVICE_NICE` the service's work waits, instead, for a moment when a rank is not
running (they block at each all-reduce), and does not preempt one. It uses the same CPU time: a
service on an idle host answers as fast as before, and on a host busy with training it answers
more slowly (docs/design.md, "The service gives way to the ranks", has the figures).

How, on Linux (elsewhere, nothing):
- a process's nice value, which the threads and processes it starts later inherit: the API only.
  The worker starts the launchers whose ranks must keep the normal priority, and a process cannot
  lower its nice value again without privilege, so the worker leaves its own;
- where the kernel schedules each session's processes as one group (autogroup, on by default on
  most desktops and many servers), a process's nice counts only against its own session's, and
  the session group's nice is what counts against the ranks (each launcher starts a session of
  its own). So a process that leads its session (started by a service manager, a container or
  `setsid`) also sets its session group's; one that does not (started from a shell) leaves it,
  since that would lower the shell's and every command's in it.
"""

from __future__ import annotations

import os
from pathlib import Path

AUTOGROUP = Path("/proc/self/autogroup")


def give_way_to_jobs(nice: int, *, whole_process: bool) -> list[str]:
    """Lower this process's CPU priority to `nice` (0: leave it); `whole_process`: also the
    process's own nice value (the API), not only its session group's (the worker). Returns what
    it changed, for the start-up log; never raises (priority is a preference, not a condition)."""
    changed: list[str] = []
    if nice <= 0:
        return changed
    if whole_process and hasattr(os, "setpriority"):
        try:
            if os.getpriority(os.PRIO_PROCESS, 0) < nice:
                # On Linux this sets the calling thread's value; called before any thread or
                # process is started, every later one inherits it.
                os.setpriority(os.PRIO_PROCESS, 0, nice)
                changed.append(f"process nice {nice}")
        except OSError:
            pass
    group_nice = session_group_nice()
    if os.getsid(0) == os.getpid() and group_nice is not None and group_nice < nice:
        try:
            AUTOGROUP.write_text(str(nice))
            changed.append(f"session group nice {nice}")
        except OSError:
            pass
    return changed


def session_group_nice(autogroup: Path = AUTOGROUP) -> int | None:
    """The nice value of this process's session group (the file reads "/autogroup-17 nice 0");
    None where the kernel has no such groups (not Linux, or built without them). Where they are
    switched off (`kernel.sched_autogroup_enabled = 0`) the value is still read, and counts for
    nothing."""
    try:
        return int(autogroup.read_text().rsplit("nice", 1)[1])
    except (OSError, IndexError, ValueError):
        return None
