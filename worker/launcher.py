"""The launcher: one process per job attempt, started by the worker's task.

Why a separate process: Celery's prefork children are daemonic, and a daemonic process may not
start multiprocessing children, which torch.multiprocessing.spawn needs. The worker therefore
starts this module with subprocess (allowed from any process) in a session of its own, so that
cancel and timeout can end the launcher and its ranks as one process group.

The launcher spawns the ranks, watches them, and reports the job's final state:
- success is decided by rank 0's result file, written after the final barrier that every rank
  reached, so a rank's abort in interpreter shutdown after that point cannot fail a finished job;
- any rank failing before then ends all ranks, and the job fails naming that rank, with the
  last lines of its traceback;
- past `max_runtime_seconds` the ranks are ended and the job fails with stop_reason "timeout".
If the worker that started it dies, the launcher ends its ranks and exits without reporting: the
job's lease then runs out and the service requeues it.

Warm starts. A worker starts its launcher before the job arrives (trainjobs.worker.supervision
keeps one ready): the launcher imports torch, then starts a fork server that imports what every
rank needs (trainjobs.worker.warm_imports), and waits for one line on stdin, the path of its run
request. Each rank is then a fork of that server: a fresh process, which has never run another
job's code, with nothing to import. A launcher serves one attempt and exits: nothing of a job
(environment, threads, open files, random state, CUDA) can reach the next, and cancel still ends
the launcher, its fork server and its ranks as one process group.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import signal
import sys
import time
from multiprocessing import resource_tracker
from pathlib import Path

import redis
import torch.multiprocessing as mp

from trainjobs.contract.events import StateChange
from trainjobs.contract.run import RunRequest
from trainjobs.store import CheckpointStore
from trainjobs.worker import supervision
from trainjobs.worker.fork_server_output import fork_server_output, fork_server_written, remove_fork_server_log
from trainjobs.worker.gpu_nodes import GpuNodes, MissingDevice
from trainjobs.worker.log_shipper import LogShipper
from trainjobs.worker.namespace_pids import use_host_pids
from trainjobs.worker.rank import run_rank
from trainjobs.worker.rank_files import rank_file_stats
from trainjobs.worker.rank_outcome import failure_or_late_success, past_disk_bound, ranks_not_started, success
from trainjobs.worker.rendezvous import Rendezvous, RendezvousRefused
from trainjobs.worker.report_relay import ReportRelay
from trainjobs.worker.reporter import EventReporter
from trainjobs.worker.slot import AttemptFiles, Slot
from trainjobs.worker.stop_relay import RESEND_SECONDS, StopRelay

log = logging.getLogger("trainjobs.launcher")

FORK_SERVER_PRELOAD = ["trainjobs.worker.warm_imports"]

# glibc's heap for the fork server and so for every rank: blocks under 64 MiB come from the heap,
# and freed memory stays with the process instead of being trimmed back to the kernel. With glibc's
# defaults a rank forked from the fork server gave memory back and faulted it in again all through
# training: 6,000 to 10,000 minor page faults a second in a 1-rank fp32 job, against about 2,000 for
# the plain script, and about 100 with these (BENCHMARKS.md §11). An operator's own values win.
RANK_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(64 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def warm_up(sandboxed_python: Path | None = None) -> None:
    """Start the fork server that ranks are forked from, with what they need already imported
    (inside the sandbox, when `sandboxed_python` runs Python there). Idempotent; the server lives
    as long as this process (it exits when we do). glibc reads its malloc settings when a process
    starts: the fork server is a new process, and ranks inherit it."""
    for name, value in RANK_MALLOC_ENV.items():
        os.environ.setdefault(name, value)
    if sandboxed_python is not None:
        resource_tracker.ensure_running()  # outside: it is the launcher's, not the job's
        multiprocessing.set_executable(str(sandboxed_python))
    multiprocessing.set_forkserver_preload(FORK_SERVER_PRELOAD)
    with fork_server_output():  # what a rank says before its training starts lands there
        multiprocessing.forkserver.ensure_running()


def launch(
    request: RunRequest,
    parent_pid: int | None = None,
    client: redis.Redis | None = None,
    ranks: RunRequest | None = None,
    disk_bytes: int | None = None,
    stop: StopRelay | None = None,
) -> StateChange | None:
    """Run this node's ranks of one attempt (given `ranks`, their own request [`request`]); return
    the final state to report, or None: the worker that started us (`parent_pid`, when given) is
    gone, or this is a node other than 0 whose ranks all finished (node 0 reports the job's end).
    Past `disk_bytes` in the ranks' folder the job fails, saying so."""
    ranks = ranks or request
    warm_up()  # at once when the worker started us ahead of the job
    try:
        rendezvous = Rendezvous(ranks, client)  # a store file in the ranks' own folder
    except (TimeoutError, RendezvousRefused) as error:
        return StateChange(
            state="failed", stop_reason="error", error=f"node {request.node_rank} ({request.hostname}): {error}"
        )
    fork_server_before = fork_server_written()
    try:
        context = _start_ranks(ranks, rendezvous)
    except (OSError, EOFError) as error:  # the fork server is gone: no rank was forked
        return ranks_not_started(ranks, error)
    parent = ParentWatch(parent_pid)
    try:
        stop = stop or StopRelay()
        stop.ranks_started(context.processes)
        outcome = _watch_ranks(ranks, context, parent, disk_bytes, stop, fork_server_before)
    finally:
        parent.close()
        if parent.gone():
            _kill_the_rest_of_our_group()
        _end_ranks(context)
    if outcome is not None or parent.gone() or request.node_rank > 0:
        return outcome
    return success(ranks) or StateChange(
        state="failed", stop_reason="error", error="all ranks exited but rank 0 wrote no result"
    )


def _start_ranks(ranks: RunRequest, rendezvous: Rendezvous):
    context = mp.start_processes(
        run_rank, args=(ranks, rendezvous.address), nprocs=ranks.ranks_here, join=False, start_method="forkserver"
    )
    # A sandboxed fork server names its ranks by their pids in its own namespace.
    use_host_pids(context.processes, multiprocessing.forkserver._forkserver._forkserver_pid)  # type: ignore[attr-defined]
    return context


def _watch_ranks(
    request: RunRequest, context, parent: ParentWatch, disk_bytes: int | None, stop: StopRelay, fork_server_before: int
) -> StateChange | None:
    """Asleep until a rank exits, the worker goes or the deadline passes (and, with a bound on
    the ranks' files, every DISK_CHECK_SECONDS), rather than waking twice a second for nothing
    beside the job's ranks. None when the ranks all ended or the worker went; else the state to
    report (a rank failed, the job ran past its time or wrote past its bound). `fork_server_before`:
    how much the fork server had written when the ranks were started."""
    runtime = request.spec.max_runtime_seconds
    deadline = time.monotonic() + runtime if runtime else None
    while True:
        timeouts = [parent.poll_seconds] if parent.poll_seconds is not None else []
        if deadline is not None:
            timeouts.append(max(0.0, deadline - time.monotonic()))
        if disk_bytes is not None:
            timeouts.append(DISK_CHECK_SECONDS)
            if folder_bytes(request.rank_path) > disk_bytes:
                return StateChange(state="failed", stop_reason="error", error=past_disk_bound(disk_bytes))
        if stop.asked:  # a preemption: asked again until they stop
            stop.forward()
            timeouts.append(RESEND_SECONDS)
        multiprocessing.connection.wait([*context.sentinels, *parent.fds], timeout=min(timeouts, default=None))
        try:
            if context.join(timeout=0, grace_period=RANKS_LEFT_GRACE_SECONDS):
                return None
        except mp.ProcessExitedException as error:
            return failure_or_late_success(request, error.error_index, error.exit_code, fork_server_before)
        except mp.ProcessRaisedException as error:
            return failure_or_late_success(request, error.error_index, 1, fork_server_before)
        if parent.gone():
            log.error("worker %s is gone; ending ranks", parent.parent_pid)
            return None
        if deadline is not None and time.monotonic() > deadline:
            return StateChange(state="failed", stop_reason="timeout", error=f"ran past max_runtime_seconds={runtime}")


class ParentWatch:
    """Whether the worker that started us (`parent_pid`; None: nobody to watch) is gone, with a
    file descriptor that becomes readable when it exits (a pidfd), so the launcher can sleep on it
    beside its ranks. Where pidfds are missing (Linux before 5.3), it is asked every second."""

    def __init__(self, parent_pid: int | None):
        self.parent_pid = parent_pid
        self.fds: list[int] = []
        self.poll_seconds: float | None = None  # None: nothing to ask on a timer
        if parent_pid is None:
            return
        try:
            self.fds = [os.pidfd_open(parent_pid)]
        except (AttributeError, OSError):  # no pidfd here, or the parent is already gone
            self.poll_seconds = 1.0

    def gone(self) -> bool:
        return self.parent_pid is not None and os.getppid() != self.parent_pid

    def close(self) -> None:
        for fd in self.fds:
            os.close(fd)
        self.fds = []


DISK_CHECK_SECONDS = 1.0

# Once a rank has failed, the others get this long to end of themselves, then as long again
# after a SIGTERM before a SIGKILL. torch's own default waits 30 s for a SIGTERM alone, which a
# stopped or hung rank never heeds: the job's failure waited for it (a stalled rank's job took
# over 100 s to fail in a CI run).
RANKS_LEFT_GRACE_SECONDS = 2.0


def folder_bytes(folder: Path) -> int:
    """What the files under `folder` hold (links not followed, however deep)."""
    return sum(stats.st_size for stats in rank_file_stats(folder))


def _kill_the_rest_of_our_group() -> None:
    """The worker is gone: its lease runs out within seconds and the job's next attempt may start
    elsewhere, so every process of this attempt goes at once (SIGKILL, not a rank's SIGTERM and its
    data loader workers, which notice their rank gone only after seconds): the ranks and their
    children, the fork server, or the sandbox's bubblewrap, whose PID namespace goes with it."""
    me = os.getpid()
    for pid in supervision.group_members(os.getpgrp()):
        if pid != me:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _end_ranks(context) -> None:
    for process in context.processes:
        if process.is_alive():
            process.terminate()
    for process in context.processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join()


def main() -> None:
    args = _arguments()
    stop = StopRelay().install()  # before anything: the worker may ask while we start
    logging.basicConfig(level=logging.INFO, format="%(asctime)s launcher %(levelname)s %(message)s")
    slot = None
    if args.slots is not None:
        gpu_nodes = GpuNodes(args.device_root, args.driver_proc)
        slot = Slot.claim(
            args.slots, args.data_root, args.host_network, args.max_processes, args.max_file_bytes, gpu_nodes
        )
        os.chdir(slot.path)  # the ranks start from here: a place their sandbox has
    try:
        warm_up(slot.python if slot else None)
        line = sys.stdin.readline()  # the run request's path, once the job arrives
        if not line.strip():
            return  # the worker closed the pipe (it stopped, or was lost) before giving us a job
        request_file = Path(line.strip())
        request = RunRequest.model_validate_json(request_file.read_text())
        request_file.unlink()  # it holds the Redis URL (and password): nobody reads it after us
        _log_to(request.run_path / "launcher.log")
        outcome = run_attempt(request, slot, args.parent, args.max_file_bytes if slot else None, stop)
    finally:
        remove_fork_server_log()
        if slot is not None:
            slot.release()
        # Interpreter shutdown puts the signal's default action back (it ends the process): a
        # stop the worker sends while this attempt is over (a preemption racing its last epoch)
        # would turn an exit after a reported end into "launcher exited with code -10".
        stop.close()
    if outcome is None:
        sys.exit(0 if os.getppid() == args.parent else 3)


def run_attempt(
    request: RunRequest, slot: Slot | None, parent_pid: int, disk_bytes: int | None, stop: StopRelay | None = None
) -> StateChange | None:
    """Give the ranks their files, relay rank 0's reports, run the ranks, report how it ended."""
    assert request.redis_url is not None and request.events_stream is not None
    client = redis.Redis.from_url(request.redis_url, socket_timeout=10, socket_connect_timeout=5)
    reporter = EventReporter(client, request.events_stream, request.job_id, request.attempt)
    store = CheckpointStore(request.checkpoint_dir)
    files = AttemptFiles(request, slot, store)
    ranks = files.for_ranks()
    relay = ReportRelay(files.channel, files.rank_dir, reporter.send, store, request.job_id, request.attempt,
                        files.owner_uid).start()  # fmt: skip
    shipper = LogShipper(files.rank_dir, reporter.send, cap_lines=request.log_lines_cap).start()
    try:
        outcome = _sandbox_without_gpus(request, slot) or launch(request, parent_pid, client, ranks, disk_bytes, stop)
    finally:
        relay.finish(timeout=RELAY_SECONDS)  # every report, every checkpoint in the store, before the end
        shipper.stop()  # every line is sent before the final state
        files.keep()
    if outcome is not None:
        reporter.send(outcome)
        log.info("job %s attempt %d: %s %s", request.job_id, request.attempt, outcome.state, outcome.stop_reason or "")
    reporter.flush(timeout=APPLIED_WAIT_SECONDS)  # sent again if Redis restarted and lost them
    return outcome


def _sandbox_without_gpus(request: RunRequest, slot: Slot | None) -> StateChange | None:
    """The leased GPUs into the sandbox, the fork server again in it (docs/design.md); or a failure."""
    if slot is None or not request.devices:
        return None
    try:
        slot.hold_gpus(request.devices)
    except MissingDevice as error:
        return StateChange(
            state="failed", stop_reason="error", error=f"node {request.node_rank} ({request.hostname}): {error}"
        )
    multiprocessing.forkserver._forkserver._stop()  # type: ignore[attr-defined]
    warm_up(slot.python)
    return None


RELAY_SECONDS = 600.0  # the last checkpoints' uploads, at most
APPLIED_WAIT_SECONDS = 30.0  # for the collector to apply our last events (an API restarting)


def _arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description="one job attempt's launcher, started ahead of its job by a worker")
    parser.add_argument("--parent", type=int, required=True, help="the worker's pid: we end our ranks if it goes")
    parser.add_argument("--slots", type=Path, help="run the ranks in a sandbox, its slot under this folder")
    parser.add_argument("--data-root", type=Path, default=Path("/nonexistent"), help="read-only in the sandbox")
    parser.add_argument("--host-network", action="store_true", help="the sandbox keeps the host's network")
    parser.add_argument("--device-root", type=Path, default=Path("/dev"), help="the GPUs' device nodes")
    parser.add_argument("--driver-proc", type=Path, default=Path("/proc/driver/nvidia"), help="the driver's state")
    parser.add_argument("--max-processes", type=int, default=512, help="the ranks' processes and threads")
    parser.add_argument("--max-file-bytes", type=int, default=2**34, help="what the ranks may write")
    return parser.parse_args()


def _log_to(path: Path) -> None:
    """From here on, our output is the job's launcher.log (it went to the worker's until now)."""
    with open(path, "ab", buffering=0) as log_file:
        os.dup2(log_file.fileno(), 1)
        os.dup2(log_file.fileno(), 2)


if __name__ == "__main__":
    main()
