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
"""

from __future__ import annotations

import logging
import os
import re
import signal
import sys
import time
from datetime import timedelta
from pathlib import Path

import torch.distributed as dist
import torch.multiprocessing as mp

from trainjobs.contract.events import StateChange
from trainjobs.contract.run import RankResult, RunRequest
from trainjobs.worker.log_shipper import LogShipper
from trainjobs.worker.rank import run_rank
from trainjobs.worker.reporter import reporter_for

log = logging.getLogger("trainjobs.launcher")

TRACEBACK_LINES = 12


def rendezvous_store(world_size: int, timeout_seconds: float) -> dist.TCPStore:
    """The ranks' rendezvous, served by the launcher as torchrun's agent serves it.

    The store binds a port the kernel picks and keeps it. Probing for a free port and handing
    its number to rank 0 to bind later would race with every other socket on the host (a
    client's outgoing connection can take that port in between) and fail the job."""
    return dist.TCPStore(
        "127.0.0.1", 0, world_size, is_master=True, wait_for_workers=False, timeout=timedelta(seconds=timeout_seconds)
    )


def launch(request: RunRequest, parent_pid: int | None = None) -> StateChange | None:
    """Run every rank of one attempt; return the final state, or None if the worker that
    started us (`parent_pid`, when given) is gone."""
    spec = request.spec
    deadline = time.monotonic() + spec.max_runtime_seconds if spec.max_runtime_seconds else None
    store = rendezvous_store(spec.world_size, request.process_group_timeout_seconds)
    context = mp.spawn(run_rank, args=(request, store.port), nprocs=spec.world_size, join=False)
    try:
        while True:
            try:
                if context.join(timeout=0.5):
                    break
            except mp.ProcessExitedException as error:
                return _failure_or_late_success(request, error.error_index, error.exit_code)
            except mp.ProcessRaisedException as error:
                return _failure_or_late_success(request, error.error_index, 1)
            if parent_pid is not None and os.getppid() != parent_pid:
                log.error("worker %s is gone; ending ranks", parent_pid)
                return None
            if deadline is not None and time.monotonic() > deadline:
                return StateChange(
                    state="failed",
                    stop_reason="timeout",
                    error=f"ran past max_runtime_seconds={spec.max_runtime_seconds}",
                )
    finally:
        _end_ranks(context)
    return _success(request) or StateChange(
        state="failed", stop_reason="error", error="all ranks exited but rank 0 wrote no result"
    )


def _failure_or_late_success(request: RunRequest, rank: int, exit_code: int) -> StateChange:
    success = _success(request)
    if success is not None:
        log.warning("rank %d exited with %s after the job finished; the job's result stands", rank, exit_code)
        return success
    how = f"exit code {exit_code}" if exit_code >= 0 else f"signal {signal.Signals(-exit_code).name}"
    error = f"rank {rank} failed ({how})"
    error_file = request.run_path / f"rank{rank}.error"
    if error_file.exists():
        tail = error_file.read_text().strip().splitlines()[-TRACEBACK_LINES:]
        error += ":\n" + without_server_paths("\n".join(tail), request)
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
    logging.basicConfig(level=logging.INFO, format="%(asctime)s launcher %(levelname)s %(message)s")
    request = RunRequest.model_validate_json(Path(sys.argv[1]).read_text())
    parent_pid = int(sys.argv[2])
    reporter = reporter_for(request)
    shipper = LogShipper(request.run_path, reporter.send).start()
    try:
        outcome = launch(request, parent_pid)
    finally:
        shipper.stop()  # every line is sent before the final state
    if outcome is None:
        sys.exit(3)
    reporter.send(outcome)
    log.info("job %s attempt %d: %s %s", request.job_id, request.attempt, outcome.state, outcome.stop_reason or "")


if __name__ == "__main__":
    main()
