"""Run the real launcher and DDP ranks from a test, without the service, and read what they left."""

from __future__ import annotations

import json
from pathlib import Path

import torch

from trainjobs.contract.events import StateChange
from trainjobs.contract.spec import JobSpec
from worker.local_run import local_request, train_locally


def mlp_spec(**overrides) -> dict:
    """An MLP on 80 synthetic 3x4x4 images: 64 train, 16 validation."""
    spec = {
        "model": {"name": "mlp", "params": {"hidden": [16]}},
        "data": {"name": "synthetic-images", "params": {"num_samples": 80, "image_size": 4, "num_classes": 4,
                                                         "val_fraction": 0.2}},
        "device": "cpu", "gpus": 1, "epochs": 1, "batch_size": 8,
        "optimizer": {"name": "sgd", "lr": 0.1, "momentum": 0.9}, "lr_scaling": "none",
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
        path = self.workdir / "checkpoints" / self.job_id / f"{self.job_id}-e{epoch:04d}.pt"
        return torch.load(path, weights_only=True)

    def checkpoint_files(self) -> list[str]:
        return sorted(path.name for path in (self.workdir / "checkpoints" / self.job_id).glob("*.pt"))


def run_locally(workdir: Path, job_id: str, spec: dict, resume_path: str | None = None,
                init_path: str | None = None) -> LocalRun:
    request = local_request(JobSpec.model_validate(spec), workdir, workdir / "data", resume_path=resume_path,
                            init_path=init_path, job_id=job_id)
    return LocalRun(workdir, job_id, train_locally(request))


def assert_same_weights(first: dict, second: dict, rtol: float = 1e-5) -> None:
    assert first.keys() == second.keys()
    for key in first:
        torch.testing.assert_close(first[key], second[key], rtol=rtol, atol=1e-7, msg=key)
