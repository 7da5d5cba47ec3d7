"""`trainjobs train SPEC`: the service's trainer, run from the shell without the service.

Same launcher, same ranks, same trainer; the events go to the console and the checkpoints to a
local directory. Use it to debug a spec before submitting it.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from trainjobs.contract.events import StateChange
from trainjobs.contract.run import RunRequest
from trainjobs.contract.spec import JobSpec
from trainjobs.worker.launcher import launch


def local_request(
    spec: JobSpec,
    workdir: Path,
    data_root: Path,
    resume_path: str | None = None,
    init_path: str | None = None,
    job_id: str | None = None,
) -> RunRequest:
    job_id = job_id or "local-" + secrets.token_hex(4)
    run_path = workdir / "runs" / job_id
    run_path.mkdir(parents=True, exist_ok=True)
    return RunRequest(
        job_id=job_id,
        attempt=1,
        spec=spec,
        devices=[],  # no lease: rank i takes the i-th GPU this shell sees
        run_dir=str(run_path),
        checkpoint_dir=str(workdir / "checkpoints"),
        data_root=str(data_root),
        resume_path=resume_path,
        init_path=init_path,
    )


def train_locally(request: RunRequest) -> StateChange:
    outcome = launch(request)
    assert outcome is not None  # only a launcher started by a worker can lose its parent
    return outcome
