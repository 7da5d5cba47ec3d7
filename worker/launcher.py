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
import logging
import multiprocessing
import multiprocessing.connection
import multiprocessing.forkserver
import os
import re
import signal
import socket
import sys
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import redis
import torch.distributed as dist
import torch.multiprocessing as mp

from trainjobs.contract.events import StateChange
from trainjobs.contract.run import RankResult, RunRequest
from trainjobs.worker.log_shipper import LogShipper
from trainjobs.worker.rank import run_rank
from trainjobs.worker.reporter import EventReporter

log = logging.getLogger("trainjobs.launcher")

TRACEBACK_LINES = 12
FORK_SERVER_PRELOAD = ["trainjobs.worker.warm_imports"]

# glibc's heap for the fork server and so for every rank: blocks under 64 MiB come from the heap,
# and freed memory stays with the process instead of being trimmed back to the kernel. With glibc's
# defaults a rank forked from the fork server gave memory back and faulted it in again all through
# training: 6,000 to 10,000 minor page faults a second in a 1-rank fp32 job, against about 2,000 for
# the plain script, and about 100 with these (BENCHMARKS.md §11). An operator's own values win.
RANK_MALLOC_ENV = {"MALLOC_MMAP_THRESHOLD_": str(64 << 20), "MALLOC_TRIM_THRESHOLD_": str(1 << 30)}


def warm_up() -> None:
    """Start the fork server that ranks are forked from, with what they need already imported.
    Idempotent; the server lives as long as this process (it exits when we do). glibc reads its
    malloc settings when a process starts: the fork server is a new process, and ranks inherit it."""
    for name, value in RANK_MALLOC_ENV.items():
        os.environ.setdefault(name, value)
    multiprocessing.set_forkserver_preload(FORK_SERVER_PRELOAD)
    multiprocessing.forkserver.ensure_running()


@dataclass(frozen=True)
class ServedStore:
    """A TCPStore and the listening socket it serves on (which must live as long as it does)."""

    store: dist.TCPStore
    listener: socket.socket

    @property
    def port(self) -> int:
        return int(self.store.port)


def rendezvous_store(world_size: int, timeout_seconds: float, host: str = "127.0.0.1") -> ServedStore:
    """The ranks' rendezvous, served by the launcher as torchrun's agent serves it, listening on
    `host` alone (loopback for a one-node job, the worker's address for several nodes).

    The listening socket is bound here, on a port the kernel picks, and handed to the store:
    torch's store would otherwise listen on every interface of the host. Probing for a free port
    and handing its number to rank 0 to bind later would race with every other socket on the host
    (a client's outgoing connection can take that port in between) and fail the job."""
    listener = socket.create_server((host, 0), family=_family_of(host), backlog=1024)
    store = dist.TCPStore(
        host,
        listener.getsockname()[1],
        world_size,
        is_master=True,
        wait_for_workers=False,
        timeout=timedelta(seconds=timeout_seconds),
        master_listen_fd=listener.fileno(),
    )
    return ServedStore(store, listener)


def _family_of(host: str) -> socket.AddressFamily:
    return socket.AF_INET6 if ":" in host else socket.AF_INET


class Rendezvous:
    """Where this node's ranks meet the others: a TCPStore, as torch ships it. One node: served
    here on loopback. Several: node 0's launcher serves it at its worker's address and publishes
    "address:port" in Redis under the attempt's key; the other nodes' launchers read the port
    there, and accept it only at the address node 0's worker recorded in SQL for this attempt
    (`request.rendezvous_host`): whoever can write to Redis cannot point ranks elsewhere."""

    def __init__(self, request: RunRequest, client: redis.Redis | None):
        timeout = request.process_group_timeout_seconds
        self.store: ServedStore | None = None
        if request.nodes == 1:
            self.store = rendezvous_store(request.spec.world_size, timeout)
            self.host, self.port = "127.0.0.1", self.store.port
        elif request.node_rank == 0:
            assert client is not None and request.rendezvous_key is not None
            self.store = rendezvous_store(request.spec.world_size, timeout, host=request.address)
            self.host, self.port = request.address, self.store.port
            client.set(request.rendezvous_key, f"{self.host}:{self.port}", ex=RENDEZVOUS_KEY_SECONDS)
        else:
            assert client is not None and request.rendezvous_key is not None
            self.host, self.port = _published(client, request.rendezvous_key, timeout)
            if self.host != request.rendezvous_host:
                raise RendezvousRefused(
                    f"the rendezvous published for node 0 is at {self.host}, not at {request.rendezvous_host}, "
                    "the address its worker recorded"
                )


class RendezvousRefused(Exception):
    """The published rendezvous is not node 0's."""


RENDEZVOUS_KEY_SECONDS = 24 * 3600


def _published(client: redis.Redis, key: str, timeout_seconds: float) -> tuple[str, int]:
    deadline = time.monotonic() + timeout_seconds
    while time.monotonic() < deadline:
        value = client.get(key)
        if value:
            host, _, port = (value.decode() if isinstance(value, bytes) else str(value)).rpartition(":")
            return host, int(port)
        time.sleep(0.2)
    raise TimeoutError(f"node 0 did not publish its rendezvous within {timeout_seconds:.0f} s")


def launch(request: RunRequest, parent_pid: int | None = None, client: redis.Redis | None = None) -> StateChange | None:
    """Run this node's ranks of one attempt; return the final state to report, or None: the
    worker that started us (`parent_pid`, when given) is gone, or this is a node other than 0
    whose ranks all finished (node 0 reports the job's end)."""
    warm_up()  # at once when the worker started us ahead of the job
    try:
        rendezvous = Rendezvous(request, client)
    except (TimeoutError, RendezvousRefused) as error:
        return StateChange(
            state="failed", stop_reason="error", error=f"node {request.node_rank} ({request.hostname}): {error}"
        )
    context = mp.start_processes(
        run_rank,
        args=(request, rendezvous.host, rendezvous.port),
        nprocs=request.ranks_here,
        join=False,
        start_method="forkserver",
    )
    parent = ParentWatch(parent_pid)
    try:
        outcome = _watch_ranks(request, context, parent)
    finally:
        parent.close()
        _end_ranks(context)
    if outcome is not None or parent.gone() or request.node_rank > 0:
        return outcome
    return _success(request) or StateChange(
        state="failed", stop_reason="error", error="all ranks exited but rank 0 wrote no result"
    )


def _watch_ranks(request: RunRequest, context, parent: ParentWatch) -> StateChange | None:
    """Asleep until a rank exits, the worker goes or the deadline passes, rather than waking twice
    a second for nothing beside the job's ranks. None when the ranks all ended or the worker went;
    else the state to report (a rank failed, or the job ran past its time)."""
    runtime = request.spec.max_runtime_seconds
    deadline = time.monotonic() + runtime if runtime else None
    while True:
        timeouts = [parent.poll_seconds] if parent.poll_seconds is not None else []
        if deadline is not None:
            timeouts.append(max(0.0, deadline - time.monotonic()))
        multiprocessing.connection.wait([*context.sentinels, *parent.fds], timeout=min(timeouts, default=None))
        try:
            if context.join(timeout=0):
                return None
        except mp.ProcessExitedException as error:
            return _failure_or_late_success(request, error.error_index, error.exit_code)
        except mp.ProcessRaisedException as error:
            return _failure_or_late_success(request, error.error_index, 1)
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


# What a rank's traceback says when a peer on another host went away: its connections closed.
PEER_LOST = re.compile(r"Connection closed by peer|Connection reset by peer|Broken pipe|ECONNRESET", re.IGNORECASE)
# A node that saw its peers go waits this long before saying so: if a peer's rank failed for a
# reason of its own, that node's report ("failed", with the traceback) arrives first and stands.
PEER_LOSS_GRACE_SECONDS = 5.0


def _failure_or_late_success(request: RunRequest, local_rank: int, exit_code: int) -> StateChange:
    success = _success(request)
    if success is not None:
        log.warning("rank %d exited with %s after the job finished; the job's result stands", local_rank, exit_code)
        return success
    rank = request.global_rank(local_rank)
    how = f"exit code {exit_code}" if exit_code >= 0 else f"signal {signal.Signals(-exit_code).name}"
    where = f" on {request.hostname}" if request.nodes > 1 else ""
    error = f"rank {rank}{where} failed ({how})"
    error_file = request.run_path / f"rank{rank}.error"
    tail = ""
    if error_file.exists():
        tail = without_server_paths("\n".join(error_file.read_text().strip().splitlines()[-TRACEBACK_LINES:]), request)
        error += ":\n" + tail
    if request.nodes > 1 and PEER_LOST.search(tail):
        time.sleep(PEER_LOSS_GRACE_SECONDS)
        # "queued": the service requeues the whole job (attempt + 1) and it resumes elsewhere.
        return StateChange(state="queued", error=f"node {request.node_rank} lost its peers: {error}")
    return StateChange(state="failed", stop_reason="error", error=error)


def without_server_paths(text: str, request: RunRequest) -> str:
    """A job's error is shown to its owner: it names files by their place in the job's own
    folders, or by file name, never by the server's absolute paths."""
    for root, name in (
        (request.data_root, "<data>"),
        (request.checkpoint_dir, "<checkpoints>"),
        (request.run_dir, "<run>"),
    ):
        text = text.replace(root.rstrip("/") + "/", name + "/")
    return re.sub(r'File "(?:[^"]*/)?([^"/]+)"', r'File "\1"', text)


def _success(request: RunRequest) -> StateChange | None:
    result_file = request.run_path / "result.json"
    if not result_file.exists():
        return None
    result = RankResult.model_validate_json(result_file.read_text())
    return StateChange(state="succeeded", stop_reason=result.stop_reason)


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
    parser = argparse.ArgumentParser(description="one job attempt's launcher, started ahead of its job by a worker")
    parser.add_argument("--parent", type=int, required=True, help="the worker's pid: we end our ranks if it goes")
    parent_pid = parser.parse_args().parent
    logging.basicConfig(level=logging.INFO, format="%(asctime)s launcher %(levelname)s %(message)s")
    warm_up()
    line = sys.stdin.readline()  # the run request's path, once the job arrives
    if not line.strip():
        return  # the worker closed the pipe (it stopped, or was lost) before giving us a job
    request = RunRequest.model_validate_json(Path(line.strip()).read_text())
    _log_to(request.run_path / "launcher.log")
    assert request.redis_url is not None and request.events_stream is not None
    client = redis.Redis.from_url(request.redis_url, socket_timeout=10, socket_connect_timeout=5)
    reporter = EventReporter(client, request.events_stream, request.job_id, request.attempt)
    shipper = LogShipper(request.run_path, reporter.send).start()
    try:
        outcome = launch(request, parent_pid, client)
    finally:
        shipper.stop()  # every line is sent before the final state
    if outcome is None:
        sys.exit(0 if os.getppid() == parent_pid else 3)
    reporter.send(outcome)
    log.info("job %s attempt %d: %s %s", request.job_id, request.attempt, outcome.state, outcome.stop_reason or "")


def _log_to(path: Path) -> None:
    """From here on, our output is the job's launcher.log (it went to the worker's until now)."""
    with open(path, "ab", buffering=0) as log_file:
        os.dup2(log_file.fileno(), 1)
        os.dup2(log_file.fileno(), 2)


if __name__ == "__main__":
    main()
