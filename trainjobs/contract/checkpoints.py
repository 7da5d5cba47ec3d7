"""How a checkpoint is named: its id names its job, its epoch and (for a checkpoint written
inside an epoch) its step, so a re-sent event can never create a second row, and a record can be
checked to be its job's own."""

from __future__ import annotations


def checkpoint_id(job_id: str, epoch: int) -> str:
    """`<job id>-e<epoch, 4 digits>`: written after `epoch` finished epochs."""
    return f"{job_id}-e{epoch:04d}"


def checkpoint_path(job_id: str, checkpoint: str) -> str:
    """Where a job's checkpoint lives, relative to the checkpoint store: under the job's folder."""
    return f"{job_id}/{checkpoint}.pt"


def is_checkpoint_of(checkpoint: str, job_id: str) -> bool:
    return checkpoint.startswith(f"{job_id}-e")
