"""Accumulation all-reduces gradients once per optimizer step, counted by a DDP comm hook."""

import torch.distributed as dist
from torch.distributed.algorithms.ddp_comm_hooks import default_hooks

from tests.worker.local_training import mlp_spec
from trainjobs.contract.run import StoreAddress
from trainjobs.contract.spec import JobSpec
from trainjobs.worker.trainer.builder import build_parts
from trainjobs.worker.trainer.checkpoints import Checkpointer, storage_at
from trainjobs.worker.trainer.distributed import init_rank
from trainjobs.worker.trainer.trainer import Trainer


def test_one_gradient_all_reduce_per_optimizer_step_with_accumulation(tmp_path):
    rank = init_rank(0, 1, StoreAddress(file=str(tmp_path / "rendezvous.store")), "cpu", timeout_seconds=60)
    try:
        # 64 samples in micro-batches of 4: 16 backward passes, in groups of 3,3,3,3,3,1.
        spec = JobSpec.model_validate(mlp_spec(batch_size=4, accumulation_steps=3))
        checkpointer = Checkpointer(storage_at(tmp_path), "hooked", 1, keep_last=1, report=None)
        trainer = Trainer(spec, build_parts(spec, rank, tmp_path), rank, checkpointer)
        all_reduces = []

        def counting_all_reduce(process_group, bucket):
            all_reduces.append(bucket.index())
            return default_hooks.allreduce_hook(process_group, bucket)

        trainer.model.register_comm_hook(None, counting_all_reduce)
        trainer.train_epoch(1)
        assert len(set(all_reduces)) == 1, "the tiny model fits one gradient bucket"
        assert len(all_reduces) == 6 == trainer.scheduler.last_epoch
    finally:
        dist.destroy_process_group()
