"""The Celery message that hands a job to a worker: the app's broker settings, the task name
and its queues, shared by the API (which sends) and the worker (which consumes).

The message carries the job id alone; the worker reads the spec from SQL when it claims the job.
Jobs are routed by device type, so a cuda job never reaches a CPU-only worker.
"""

from __future__ import annotations

from celery import Celery

RUN_JOB_TASK = "trainjobs.run_job"


def queue_for(namespace: str, device: str) -> str:
    return f"{namespace}.{device}"


def make_celery(name: str, redis_url: str, visibility_timeout: int) -> Celery:
    app = Celery(name, broker=redis_url)
    app.conf.update(
        broker_connection_retry_on_startup=True,
        broker_connection_timeout=3,
        # Redis redelivers an unacknowledged message after this long. The job's SQL lease, not
        # the broker, decides who runs it, so a redelivery while a job runs claims nothing.
        # It sweeps for such messages every `unacked_restore_interval` s (kombu's default sweep,
        # 10 s x a throttle of 10, would leave a short timeout unchecked for minutes).
        broker_transport_options={"visibility_timeout": visibility_timeout,
                                  "unacked_restore_interval": max(1, min(10, visibility_timeout // 2)),
                                  "unacked_restore_throttle": 1},
        task_serializer="json",
        accept_content=["json"],
        task_ignore_result=True,
        # Acknowledge after the task returns: a worker that dies before claiming the job leaves
        # the message to be redelivered; one that dies after is covered by the lease.
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        worker_hijack_root_logger=False,
    )
    return app
