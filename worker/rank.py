"""The spawn target: one DDP rank. Set up, build, train, tear down.

Each rank's stdout and stderr go to its own log file in the run directory. A rank that raises
writes its traceback next to it for the launcher to report. A rank ends with os._exit once its
output is flushed and its process group destroyed: with torch 2.13/2.14 on CPU, gloo ranks
sometimes abort (SIGABRT) in interpreter shutdown after all their work is done, and skipping
that shutdown avoids it.
"""

from __future__ import annotations

import os
import sys
import traceback
from typing import TYPE_CHECKING

import torch.distributed as dist

from trainjobs.contract.run import RankResult, RunRequest

if TYPE_CHECKING:
    from trainjobs.worker.trainer.distributed import RankContext
    from trainjobs.worker.trainer.trainer import Trainer


def run_rank(local_rank: int, request: RunRequest, store_host: str, store_port: int) -> None:
    """One rank of this node: `local_rank` here, global rank `request.global_rank(local_rank)`."""
    rank = request.global_rank(local_rank)
    if not request.is_local:
        _redirect_output(request, rank)
    if request.nodes > 1 and request.socket_ifname:
        # gloo and NCCL connect across hosts on the interface of the worker's address. Set here,
        # in the rank: a rank is forked from a fork server that started before the job was known.
        os.environ["GLOO_SOCKET_IFNAME"] = os.environ["NCCL_SOCKET_IFNAME"] = request.socket_ifname
    exit_code = 0
    try:
        stop_reason = train_rank(rank, request, store_port, store_host, local_rank)
        if rank == 0:
            result = RankResult(stop_reason=stop_reason)
            (request.run_path / "result.json").write_text(result.model_dump_json())
    except BaseException:
        exit_code = 1
        (request.run_path / f"rank{rank}.error").write_text(traceback.format_exc())
        traceback.print_exc()
    finally:
        if dist.is_initialized() and exit_code == 0:
            dist.destroy_process_group()
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(exit_code)


def train_rank(
    rank: int, request: RunRequest, store_port: int, store_host: str = "127.0.0.1", local_rank: int | None = None
) -> str:
    """Set up this rank's process group, build the job's parts, train; return the stop reason."""
    # Imported here: the spawned interpreter pays for torch only once it is a rank.

    import torch

    from trainjobs.worker.trainer.distributed import init_rank

    spec = request.spec
    context = init_rank(
        rank,
        spec.world_size,
        store_port,
        spec.device,
        request.process_group_timeout_seconds,
        leased_gpus=request.devices,
        threads=request.threads_per_rank,
        store_host=store_host,
        local_rank=rank if local_rank is None else local_rank,
    )
    print(
        f"rank {rank} of {spec.world_size} on {context.device} ({torch.get_num_threads()} threads, "
        f"torch {torch.__version__}), job {request.job_id} attempt {request.attempt}"
        + (f", node {request.node_rank} of {request.nodes} on {request.hostname}" if request.nodes > 1 else ""),
        flush=True,
    )
    trainer = _trainer(request, context)
    stop_reason = trainer.fit()
    # Every rank reaches this barrier only after rank 0 wrote and reported its last checkpoint.
    dist.barrier()
    print(f"rank {rank} done after epoch {trainer.epoch}: {stop_reason}", flush=True)
    return stop_reason


def _trainer(request: RunRequest, context: RankContext) -> Trainer:
    """The job's trainer on this rank, given its parts, and resumed or initialised as asked."""
    from pathlib import Path

    from trainjobs.worker.reporter import reporter_for
    from trainjobs.worker.trainer.builder import build_parts
    from trainjobs.worker.trainer.checkpoints import Checkpointer, storage_at
    from trainjobs.worker.trainer.telemetry import EpochTelemetry
    from trainjobs.worker.trainer.trainer import Trainer

    spec = request.spec
    report = reporter_for(request).send if context.is_main else None
    storage = storage_at(request.checkpoint_dir)
    checkpointer = Checkpointer(storage, request.job_id, request.attempt, spec.checkpoint.keep_last, report)
    parts = build_parts(spec, context, Path(request.data_root))
    telemetry = EpochTelemetry(
        context.device, spec.world_size, spec.epochs, parts.steps_per_epoch, report, request.progress_interval_seconds
    )
    trainer = Trainer(spec, parts, context, checkpointer, report, telemetry)
    if request.resume_path:
        trainer.load_state_dict(checkpointer.load(request.resume_path))
        print(f"resumed from {request.resume_path} after epoch {trainer.epoch}", flush=True)
    elif request.init_path:
        skipped = trainer.load_weights(checkpointer.load(request.init_path)["model"])
        print(f"initialised from {request.init_path}; skipped keys: {skipped or 'none'}", flush=True)
    return trainer


def _redirect_output(request: RunRequest, rank: int) -> None:
    with open(request.run_path / f"rank{rank}.log", "ab", buffering=0) as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
    # The rank's streams for the rest of its life: over the log file's copies in fds 1 and 2.
    sys.stdout = open(1, "w", buffering=1, closefd=False)  # noqa: SIM115
    sys.stderr = open(2, "w", buffering=1, closefd=False)  # noqa: SIM115
