"""How a checkpoint is named: its id names its job, its epoch and (for a checkpoint written
inside an epoch) its step, so a re-sent event can never create a second row, and a record can be
checked to be its job's own."""

from __future__ import annotations


def checkpoint_id(job_id: str, epoch: int, step: int = 0) -> str:
    """`<job id>-e<epoch, 4 digits>`: written after `epoch` finished epochs; a preemption's, taken
    `step` optimizer steps into the next epoch, adds `-s<step, 6 digits>`."""
    return f"{job_id}-e{epoch:04d}" + (f"-s{step:06d}" if step else "")


def checkpoint_path(job_id: str, checkpoint: str, attempt: int) -> str:
    """Where an attempt of a job writes a checkpoint, relative to the checkpoint store: under the
    job's folder, in its attempt's own. An attempt rotates out only files it wrote or inherited
    from the checkpoint it resumed from, so an attempt that lives on after the job moved past it
    (a worker cut off from SQL) can never delete the files of a later attempt."""
    return f"{job_id}/a{attempt}/{checkpoint}.pt"


def is_checkpoint_of(checkpoint: str, job_id: str) -> bool:
    return checkpoint.startswith(f"{job_id}-e")
