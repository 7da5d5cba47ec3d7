"""The Celery message that hands a job to a worker: the task name and its queues, shared by the
API (which sends) and the worker (which consumes). The Celery app itself is
trainjobs.connections'.

The message carries the job id alone; the worker reads the spec from SQL when it claims the job.
Jobs are routed by device type, so a cuda job never reaches a CPU-only worker.
"""

from __future__ import annotations

RUN_JOB_TASK = "trainjobs.run_job"
