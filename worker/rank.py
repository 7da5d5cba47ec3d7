"""The spawn target: one DDP rank. Set up, build, train, tear down.

Each rank's stdout and stderr go to its own log file in its folder (`request.rank_dir`: in the
sandbox's slot for a service job). A rank that raises writes its traceback next to it for the
launcher to report. A job's own code is first on the import path, its packages next. Rank 0 of a
service job reports to its launcher (trainjobs.worker.trainer.handoff), never to Redis or the
store itself. A rank ends with os._exit once its
output is flushed and its process group destroyed: with torch 2.13/2.14 on CPU, gloo ranks
sometimes abort (SIGABRT) in interpreter shutdown after all their work is done, and skipping
that shutdown avoids it.
"""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import torch.distributed as dist

from trainjobs.contract.run import RankResult, RunRequest, StoreAddress
from trainjobs.worker.trainer.preemption import StopRequest

if TYPE_CHECKING:
    from pydantic import BaseModel

    from trainjobs.worker.trainer.distributed import RankContext
    from trainjobs.worker.trainer.trainer import Trainer


def run_rank(local_rank: int, request: RunRequest, store: StoreAddress) -> None:
    """One rank of this node: `local_rank` here, global rank `request.global_rank(local_rank)`."""
    stop = StopRequest().install()  # first: the launcher may ask this rank to stop at any time
    rank = request.global_rank(local_rank)
    if not request.is_local:
        _redirect_output(request, rank)
    _own_multiprocessing()
    sys.path[:0] = [path for path in (request.code_dir, request.packages_dir) if path]
    # gloo and NCCL connect across hosts on the interface of the worker's address, and on one node
    # over loopback (a sandbox's own network has nothing else, and its host name resolves to
    # nothing). Set here, in the rank: it is forked from a fork server that started before the job.
    interface = request.socket_ifname if request.nodes > 1 else "lo"
    if interface:
        os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = interface
    exit_code = 0
    try:
        stop_reason = train_rank(rank, request, store, local_rank, stop)
        if rank == 0:
            result = RankResult(stop_reason=stop_reason)
            (request.rank_path / "result.json").write_text(result.model_dump_json())
    except BaseException:
        exit_code = 1
        (request.rank_path / f"rank{rank}.error").write_text(traceback.format_exc())
        traceback.print_exc()
    finally:
        if dist.is_initialized() and exit_code == 0:
            dist.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)


def _own_multiprocessing() -> None:
    """Processes this rank starts (its data loader's workers) are its own: started by this
    interpreter, with their sockets in this rank's /tmp, tracked by its own resource tracker. A
    rank is forked from its launcher's fork server and inherits the launcher's choices and some
    of its descriptors: the executable that starts a sandbox (none can be made inside one), a
    temporary folder outside it, the launcher's resource tracker. Called before the job's code
    is on the import path."""
    import multiprocessing
    from multiprocessing import forkserver, resource_tracker

    multiprocessing.set_executable(sys.executable)
    multiprocessing.current_process()._config.pop("tempdir", None)  # type: ignore[attr-defined]
    # The fork server hands each rank two of the launcher's pipes, and the job's code must hold
    # neither: the launcher's resource tracker (root, outside the sandbox: a name registered
    # there is unlinked as root when it exits; the rank's own tracker starts here when one is
    # first needed) and the fork server's alive pipe. Nor the launcher's stdin.
    tracker: Any = resource_tracker._resource_tracker  # private: no stubs
    server: Any = forkserver._forkserver
    for descriptor in (tracker._fd, server._forkserver_alive_fd):
        if descriptor is not None:
            os.close(descriptor)
    tracker._fd = server._forkserver_alive_fd = None
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)


def train_rank(
    rank: int, request: RunRequest, store: StoreAddress, local_rank: int | None = None, stop: StopRequest | None = None
) -> str:
    """Set up this rank's process group, build the job's parts, train; return the stop reason."""
    # Imported here: the spawned interpreter pays for torch only once it is a rank.

    import torch

    from trainjobs.worker.trainer.distributed import init_rank

    spec = request.spec
    context = init_rank(
        rank,
        spec.world_size,
        store,
        spec.device,
        request.process_group_timeout_seconds,
        leased_gpus=request.devices,
        threads=request.threads_per_rank,
        local_rank=rank if local_rank is None else local_rank,
    )
    print(
        f"rank {rank} of {spec.world_size} on {context.device} ({torch.get_num_threads()} threads, "
        f"torch {torch.__version__}), job {request.job_id} attempt {request.attempt}"
        + (f", node {request.node_rank} of {request.nodes} on {request.hostname}" if request.nodes > 1 else ""),
        flush=True,
    )
    trainer = _trainer(request, context, stop)
    stop_reason = trainer.fit()
    # Every rank reaches this barrier only after rank 0 wrote and reported its last checkpoint.
    dist.barrier()
    inside = f" and {trainer.step} steps into the next" if trainer.step else ""
    print(f"rank {rank} done after epoch {trainer.epoch}{inside}: {stop_reason}", flush=True)
    return stop_reason


def _trainer(request: RunRequest, context: RankContext, stop: StopRequest | None) -> Trainer:
    """The job's trainer on this rank, given its parts, and resumed or initialised as asked."""
    from pathlib import Path

    from trainjobs.worker.reporter import ConsoleReporter
    from trainjobs.worker.trainer.builder import build_parts
    from trainjobs.worker.trainer.catalog import resolve_code_entries
    from trainjobs.worker.trainer.checkpoints import Checkpointer, CheckpointStorage, storage_at
    from trainjobs.worker.trainer.handoff import HandedOverStorage, LauncherChannel
    from trainjobs.worker.trainer.preemption import StopAgreement
    from trainjobs.worker.trainer.telemetry import EpochTelemetry
    from trainjobs.worker.trainer.trainer import Trainer

    spec = resolve_code_entries(request.spec)  # the job's own entries: imported here, in the sandbox
    report: Callable[[BaseModel], None] | None = None
    storage: CheckpointStorage
    if request.channel is None:  # `trainjobs train`: the console, and the store
        storage = storage_at(request.checkpoint_dir)
        report = ConsoleReporter(request.run_path, request.job_id, request.attempt).send if context.is_main else None
    else:
        storage = HandedOverStorage(request.rank_path)
        report = LauncherChannel(request.channel).send if context.is_main else None
    checkpointer = Checkpointer(storage, request.job_id, request.attempt, spec.checkpoint.keep_last, report)
    parts = build_parts(spec, context, Path(request.data_root))
    telemetry = EpochTelemetry(
        context.device, spec.world_size, spec.epochs, parts.steps_per_epoch, report, request.progress_interval_seconds
    )
    agreement = StopAgreement(stop, context.world_size) if stop is not None and not request.is_local else None
    trainer = Trainer(spec, parts, context, checkpointer, report, telemetry, agreement)
    if request.resume_path:
        trainer.load_state_dict(checkpointer.load(request.resume_path))
        print(f"resumed from {request.resume_path} after epoch {trainer.epoch}", flush=True)
    elif request.init_path:
        skipped = trainer.load_weights(checkpointer.load(request.init_path)["model"])
        print(f"initialised from {request.init_path}; skipped keys: {skipped or 'none'}", flush=True)
    return trainer


def _redirect_output(request: RunRequest, rank: int) -> None:
    with open(request.rank_path / f"rank{rank}.log", "ab", buffering=0) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    # The rank's streams for the rest of its life: over the log file's copies in fds 1 and 2.
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
