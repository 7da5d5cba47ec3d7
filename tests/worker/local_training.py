"""Run the real trainer from a test, without the service, and read what it left: a one-rank job
in this process (the rank's own set-up and trainer, without a spawn), a wider one through the
real launcher and DDP ranks."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import torch.distributed as dist

from trainjobs.contract.checkpoints import checkpoint_id, checkpoint_path
from trainjobs.contract.events import StateChange
from trainjobs.contract.run import RunRequest, StoreAddress
from trainjobs.contract.spec import JobSpec
from trainjobs.worker.local_run import local_request, train_locally
from trainjobs.worker.rank import train_rank


def mlp_spec(**overrides) -> dict:
    """An MLP on 80 synthetic 3x4x4 images: 64 train, 16 validation."""
    spec = {
        "model": {"name": "mlp", "params": {"hidden": [16]}},
        "data": {
            "name": "synthetic-images",
            "params": {"num_samples": 80, "image_size": 4, "num_classes": 4, "val_fraction": 0.2},
        },
        "device": "cpu",
        "gpus": 1,
        "epochs": 1,
        "batch_size": 8,
        "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9},
        "lr_scaling": "none",
    }
    spec.update(overrides)
    return spec


class LocalRun:
    def __init__(self, workdir: Path, job_id: str, outcome: StateChange):
        self.workdir = workdir
        self.job_id = job_id
        self.outcome = outcome

    @property
    def metrics(self) -> list[dict]:
        lines = (self.workdir / "runs" / self.job_id / "metrics.jsonl").read_text().splitlines()
        return [json.loads(line) for line in lines]

    def checkpoint(self, epoch: int) -> dict:
        path = self.workdir / "checkpoints" / checkpoint_path(self.job_id, checkpoint_id(self.job_id, epoch), 1)
        return torch.load(path, weights_only=True)

    def checkpoint_files(self) -> list[str]:
        return sorted(path.name for path in (self.workdir / "checkpoints" / self.job_id).glob("a*/*.pt"))


def run_locally(
    workdir: Path, job_id: str, spec: dict, resume_path: str | None = None, init_path: str | None = None
) -> LocalRun:
    request = local_request(
        JobSpec.model_validate(spec),
        workdir,
        workdir / "data",
        resume_path=resume_path,
        init_path=init_path,
        job_id=job_id,
    )
    outcome = train_in_process(request) if request.spec.world_size == 1 else train_locally(request)
    return LocalRun(workdir, job_id, outcome)


def train_in_process(request: RunRequest) -> StateChange:
    """The one rank of a one-rank job, run in this process as a spawned rank would run it."""
    store = StoreAddress(file=str(request.rank_path / "rendezvous.store"))
    try:
        return StateChange(state="succeeded", stop_reason=train_rank(0, request, store))
    except Exception as error:
        return StateChange(state="failed", stop_reason="error", error=f"{type(error).__name__}: {error}")
    finally:
        if dist.is_initialized():
            dist.destroy_process_group()


def assert_same_weights(first: dict, second: dict, rtol: float = 1e-5) -> None:
    assert first.keys() == second.keys()
    for key in first:
        torch.testing.assert_close(first[key], second[key], rtol=rtol, atol=1e-7, msg=key)


class StopAfterSteps:
    """The ranks' agreement to stop, as a preemption's signal would bring it, after `steps`
    optimizer steps of this attempt (a one-rank run: no peers to agree with)."""

    def __init__(self, steps: int):
        self.steps, self.taken = steps, 0

    def after_step(self) -> bool:
        self.taken += 1
        return self.taken == self.steps

    def now(self) -> bool:
        return False

    def finish(self) -> None:
        pass


def preempt_in_process(workdir: Path, job_id: str, spec: dict, steps: int) -> str:
    """A one-rank job, in this process, stopped after `steps` optimizer steps as a preemption
    stops it; returns its checkpoint's path (relative to the store) to resume from."""
    from trainjobs.worker.rank import _trainer
    from trainjobs.worker.trainer.distributed import init_rank
    from trainjobs.worker.trainer.trainer import PREEMPTED

    request = local_request(JobSpec.model_validate(spec), workdir, workdir / "data", job_id=job_id)
    store = StoreAddress(file=str(request.rank_path / "rendezvous.store"))
    context = init_rank(0, 1, store, "cpu", 60)
    try:
        trainer = _trainer(request, context, None)
        trainer.stop = StopAfterSteps(steps)  # type: ignore[assignment]
        assert trainer.fit() == PREEMPTED
        return checkpoint_path(job_id, checkpoint_id(job_id, trainer.epoch, trainer.step), 1)
    finally:
        dist.destroy_process_group()
