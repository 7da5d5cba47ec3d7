"""Builds a job's training parts from its spec: data loaders, the model and its DDP (or
DataParallel) wrapper, optimizer, scheduler and gradient scaler. The Trainer receives them, as
pytorch/examples' multigpu.py hands its Trainer a model, a loader and an optimizer."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.optim.lr_scheduler import LRScheduler
from torch.utils.data import DataLoader, Dataset, Subset

from trainjobs.contract.spec import JobSpec
from trainjobs.worker.trainer.catalog import build_datasets, build_model, build_task, uses_channels_last
from trainjobs.worker.trainer.distributed import RankContext
from trainjobs.worker.trainer.preemption import ResumableSampler
from trainjobs.worker.trainer.schedule import build_scheduler
from trainjobs.worker.trainer.task import Task


@dataclass
class TrainingParts:
    model: nn.Module  # the plain model: what checkpoints hold and evaluation calls
    wrapped: nn.Module  # DDP (or DataParallel) around it: what a training step calls
    train_loader: DataLoader
    train_sampler: ResumableSampler  # can start into its epoch (a resume inside an epoch)
    val_loader: DataLoader
    optimizer: torch.optim.Optimizer
    scheduler: LRScheduler
    scaler: torch.amp.GradScaler
    memory_format: torch.memory_format  # channels_last for convolutional models on cuda
    steps_per_epoch: int  # optimizer steps
    task: Task  # the loss and the figures it reports


def build_parts(spec: JobSpec, rank: RankContext, data_root: Path) -> TrainingParts:
    device = rank.device
    torch.manual_seed(spec.seed)  # the same initial weights on every rank
    full_set, train_set, val_set = build_datasets(spec.data.name, spec.data.params, data_root)
    train_loader, train_sampler, val_loader = _loaders(spec, rank, train_set, val_set)
    # cudnn autotuning (seed 003) for convolutional models on cuda, whose inputs have a fixed size:
    # it picks the fastest kernels, which may differ from run to run (see docs/design.md on resume).
    convolutional_on_cuda = device.type == "cuda" and uses_channels_last(spec.model.name)
    torch.backends.cudnn.benchmark = convolutional_on_cuda
    memory_format = torch.channels_last if convolutional_on_cuda else torch.contiguous_format
    model = build_model(spec.model.name, spec.model.params, full_set).to(device, memory_format=memory_format)
    wrapped: nn.Module
    if spec.strategy == "dp":
        wrapped = nn.DataParallel(model, device_ids=list(range(spec.gpus)))
    else:
        wrapped = DistributedDataParallel(model, device_ids=[device.index] if device.type == "cuda" else None)
    optimizer = _build_optimizer(spec, model)
    steps_per_epoch = math.ceil(len(train_loader) / spec.accumulation_steps)
    return TrainingParts(
        model=model,
        wrapped=wrapped,
        train_loader=train_loader,
        train_sampler=train_sampler,
        val_loader=val_loader,
        optimizer=optimizer,
        scheduler=build_scheduler(optimizer, spec.scheduler, spec.epochs, steps_per_epoch),
        scaler=torch.amp.GradScaler(device.type, enabled=spec.precision == "fp16"),
        memory_format=memory_format,
        steps_per_epoch=steps_per_epoch,
        task=build_task(spec.model.name, device),
    )


def _loaders(
    spec: JobSpec, rank: RankContext, train_set: Dataset, val_set: Dataset
) -> tuple[DataLoader, ResumableSampler, DataLoader]:
    """This rank's shard of the training set (shuffled per epoch, the same order on every rank)
    and of the validation set (without padding, so every sample counts exactly once)."""
    train_sampler = ResumableSampler(
        train_set, num_replicas=rank.world_size, rank=rank.rank, shuffle=True, seed=spec.seed
    )
    val_shard = Subset(val_set, range(rank.rank, len(val_set), rank.world_size))
    # DataParallel splits each batch over its GPUs inside one process: it loads all of them.
    batch_size = spec.batch_size * (spec.gpus if spec.strategy == "dp" else 1)
    loader_options = _loader_options(spec.data.params, rank.device)
    train_loader = DataLoader(train_set, batch_size=batch_size, sampler=train_sampler, **loader_options)
    val_loader = DataLoader(val_shard, batch_size=batch_size, **loader_options)
    return train_loader, train_sampler, val_loader


def _build_optimizer(spec: JobSpec, model: nn.Module) -> torch.optim.Optimizer:
    options = spec.optimizer
    lr = spec.effective_lr
    if options.name == "sgd":
        return torch.optim.SGD(model.parameters(), lr=lr, momentum=options.momentum, weight_decay=options.weight_decay)
    return torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=options.weight_decay)


def _loader_options(params: dict[str, Any], device: torch.device) -> dict[str, Any]:
    workers = params["num_workers"]
    return {
        "num_workers": workers,
        "pin_memory": params["pin_memory"] and device.type == "cuda",
        "persistent_workers": workers > 0,
    }
