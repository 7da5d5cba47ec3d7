"""The notices a worker listens to while its jobs run: each committed change of a job is
announced on a Redis pub/sub channel as "<job id> <state>" (trainjobs.jobs.job_cache
publishes, trainjobs.worker.state_notices listens).

A notice only wakes the worker: it then reads the job from SQL, which alone decides. A notice
lost (Redis restarting, say) is made up for by the lease renewal, which reads the same.
"""

from __future__ import annotations


def state_notice(job_id: str, state: str) -> str:
    return f"{job_id} {state}"


def read_state_notice(data: bytes | str) -> tuple[str, str]:
    """(job id, state); ("", "") for what is not a notice."""
    text = data.decode(errors="replace") if isinstance(data, bytes) else data
    job_id, _, state = text.partition(" ")
    return (job_id, state) if state else ("", "")
