"""Process-group set-up and teardown for one rank: gloo on cpu, NCCL with one GPU per rank."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import timedelta

import torch
import torch.distributed as dist

from trainjobs.contract.run import StoreAddress
from trainjobs.worker.devices import core_share


@dataclass(frozen=True)
class RankContext:
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def init_rank(
    rank: int,
    world_size: int,
    store: StoreAddress,
    device_kind: str,
    timeout_seconds: float,
    leased_gpus: list[int] | None = None,
    threads: int | None = None,
    local_rank: int | None = None,
) -> RankContext:
    """`store`: the rendezvous (a file in the ranks' folder, or node 0's TCP store).
    `local_rank`: this rank's place on its host [rank], which picks its GPU.
    `leased_gpus`: the GPUs a worker leased to the job (physical ids). With DDP each rank then
    sees only its own, set before CUDA initialises; DataParallel (one rank) sees them all.
    Without a lease (`trainjobs train`) rank i takes the i-th GPU the shell sees.
    `threads`: CPU threads for this rank [the host's cores over the world size]."""
    timeout = timedelta(seconds=timeout_seconds)
    torch.set_num_threads(threads or core_share(world_size))
    if store.file is not None:
        rendezvous: dist.Store = dist.FileStore(store.file, world_size)
    else:
        assert store.host is not None and store.port is not None
        rendezvous = dist.TCPStore(store.host, store.port, world_size, is_master=False, timeout=timeout)
    if device_kind == "cuda":
        visible, index = gpu_visibility(rank if local_rank is None else local_rank, world_size, leased_gpus)
        if visible is not None:
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
        torch.cuda.set_device(index)
        device, backend = torch.device("cuda", index), "nccl"
    else:
        device, backend = torch.device("cpu"), "gloo"
    dist.init_process_group(
        backend,
        store=rendezvous,
        rank=rank,
        world_size=world_size,
        timeout=timeout,
        device_id=device if device.type == "cuda" else None,
    )
    return RankContext(rank=rank, world_size=world_size, device=device)


def gpu_visibility(rank: int, world_size: int, leased_gpus: list[int] | None) -> tuple[str | None, int]:
    """(CUDA_VISIBLE_DEVICES for this rank or None to leave it, the cuda index it then uses)."""
    if not leased_gpus:
        return None, rank
    visible = [leased_gpus[rank]] if world_size > 1 else leased_gpus
    return ",".join(map(str, visible)), 0


def all_reduce_max(values: list[float], device: torch.device) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.tolist()


def all_reduce_sum(values: list[float], device: torch.device) -> list[float]:
    tensor = torch.tensor(values, dtype=torch.float64, device=device)
    dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor.tolist()
