"""The baseline: a plain hand-written DDP loop, the few lines from the PyTorch DDP tutorial,
training the same model on the same data with the same ranks as the trainer does."""

from __future__ import annotations

import json
import os
import socket
import time
from contextlib import nullcontext
from datetime import timedelta
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler

from trainjobs.contract.spec import JobSpec
from trainjobs.worker.trainer.catalog import build_datasets, build_model


def free_port() -> int:
    """As a hand-written script does it (the baseline keeps the usual MASTER_PORT rendezvous)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _rank(rank: int, world_size: int, port: int, spec_json: str, result_path: str, threads: int) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(threads)
    dist.init_process_group("gloo", rank=rank, world_size=world_size, timeout=timedelta(seconds=120))
    spec = JobSpec.model_validate_json(spec_json)
    loader, sampler, model, optimizer = _setup(spec, rank, world_size)
    autocast = (lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if spec.precision == "bf16" else nullcontext
    accumulation = spec.accumulation_steps
    epoch_rates, epoch_windows, epoch_samples, first_step_done = [], [], [], False
    trained, total = [], 0  # (wall-clock time, samples trained so far, all ranks) after each optimizer step
    for epoch in range(1, spec.epochs + 1):
        sampler.set_epoch(epoch)
        start, started_at, samples = time.perf_counter(), time.time(), 0
        for step, (inputs, targets) in enumerate(loader):
            last = (step + 1) % accumulation == 0 or step + 1 == len(loader)
            with nullcontext() if last else model.no_sync():
                with autocast():
                    loss = F.cross_entropy(model(inputs), targets) / accumulation
                loss.backward()
            if last:
                optimizer.step()
                optimizer.zero_grad()
                if rank == 0 and not first_step_done:  # the start-up benchmark's mark (bench dispatch)
                    print(f"first optimizer step done at {time.time():.3f}", flush=True)
                    first_step_done = True
            samples += len(inputs)
            if last:
                trained.append((time.time(), total + samples * world_size))
        dist.barrier()
        epoch_rates.append(samples * world_size / (time.perf_counter() - start))
        epoch_windows.append((started_at, time.time()))
        epoch_samples.append(samples * world_size)
        total += samples * world_size
        if rank == 0:  # after each epoch, so that a benchmark can wait for one (bench/steps.py)
            figures = {"epoch_windows": epoch_windows, "epoch_samples": epoch_samples, "trained": trained}
            partial = Path(f"{result_path}.partial")
            partial.write_text(json.dumps({"samples_per_second": epoch_rates, **figures}))
            partial.replace(result_path)
    dist.destroy_process_group()
    os._exit(0)


def _setup(spec: JobSpec, rank: int, world_size: int):
    """The data, the DDP model and the spec's own optimizer, written out as a script would."""
    torch.manual_seed(spec.seed)
    full, train, _ = build_datasets(spec.data.name, spec.data.params, "/nonexistent")
    sampler = DistributedSampler(train, num_replicas=world_size, rank=rank, shuffle=True, seed=spec.seed)
    loader = DataLoader(train, batch_size=spec.batch_size, sampler=sampler)
    model = DDP(build_model(spec.model.name, spec.model.params, full))
    options = spec.optimizer
    if options.name == "sgd":
        optimizer = torch.optim.SGD(
            model.parameters(), lr=spec.effective_lr, momentum=options.momentum, weight_decay=options.weight_decay
        )
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=spec.effective_lr, weight_decay=options.weight_decay)
    return loader, sampler, model, optimizer


def run_plain_ddp(spec: JobSpec, result_path: str, threads: int, start_method: str = "spawn") -> list[float]:
    """Samples per second of each epoch, all ranks together; `threads` per rank."""
    return timed_plain_ddp(spec, result_path, threads, start_method)["samples_per_second"]


def timed_plain_ddp(spec: JobSpec, result_path: str, threads: int, start_method: str = "spawn") -> dict:
    """Each epoch's samples per second ("samples_per_second"), its wall-clock (start, end)
    ("epoch_windows") and the samples all ranks trained in it ("epoch_samples"); after each
    optimizer step, the time and the samples trained so far by all ranks ("trained"). Times are
    time.time(). `start_method` "forkserver": the ranks are forked from a fork server warmed as a
    service launcher warms its own (what it preloads, its heap settings; bench/gap.py)."""
    if start_method == "forkserver":
        from trainjobs.worker.launcher import warm_up

        warm_up()
    mp.start_processes(
        _rank,
        args=(spec.world_size, free_port(), spec.model_dump_json(), result_path, threads),
        nprocs=spec.world_size,
        join=True,
        start_method=start_method,
    )
    with open(result_path) as file:
        return json.load(file)


if __name__ == "__main__":
    # `python -m bench.support.plain_ddp SPEC.json RESULT.json [THREADS] [--fork-server]`: the plain loop as a
    # user starts it from a shell; THREADS per rank, by default the cores shared among the ranks.
    import sys

    fork_server = "--fork-server" in sys.argv
    arguments = [argument for argument in sys.argv[1:] if argument != "--fork-server"]
    plain_spec = JobSpec.model_validate_json(Path(arguments[0]).read_text())
    default_threads = max(1, (os.cpu_count() or 1) // plain_spec.world_size)
    run_plain_ddp(
        plain_spec,
        arguments[1],
        threads=int(arguments[2]) if len(arguments) > 2 else default_threads,
        start_method="forkserver" if fork_server else "spawn",
    )
