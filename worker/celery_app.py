"""The worker: a Celery app consuming its device type's queue, with one task that runs a job.

The pool is threads, one per device (slot): a task thread only claims the job, starts the
launcher process and keeps the job's lease alive while it runs; the ranks are the launcher's
children (see trainjobs.worker.launcher for why not Celery's prefork children).

The process holds one Redis client (heartbeat, fleet reads, reports) and one Celery app, both
from trainjobs.connections, and one subscription to job-state notices (trainjobs.worker.state_notices).
"""

from __future__ import annotations

import logging
import socket
import time
from collections.abc import Callable

import redis
from celery import Celery
from celery.worker import state as worker_state

from trainjobs.connections import celery_app, redis_client
from trainjobs.contract.dispatch import RUN_JOB_TASK
from trainjobs.contract.workers import live_workers
from trainjobs.jobs.db import make_engine, make_session_factory
from trainjobs.jobs.job_cache import JobCacheWriter
from trainjobs.settings import Settings
from trainjobs.worker.devices import DevicePool
from trainjobs.worker.heartbeat import Heartbeat
from trainjobs.worker.job_runner import JobRunner
from trainjobs.worker.network import wait_for_route
from trainjobs.worker.reporter import EventReporter
from trainjobs.worker.sandbox import unavailable_because
from trainjobs.worker.state_notices import StateNotices
from trainjobs.worker.supervision import SandboxOptions

log = logging.getLogger(__name__)

RETRY_PAUSE_SECONDS = 0.5


def create_worker_app(settings: Settings, pool: DevicePool, hostname: str, client: redis.Redis, address: str) -> Celery:
    app = celery_app("trainjobs-worker", settings)
    queue = settings.keys.run_queue(pool.kind)

    def send_again(job_id: str) -> None:
        app.send_task(RUN_JOB_TASK, args=[job_id], queue=queue)

    runner = _job_runner(settings, pool, hostname, client, address, send_again)

    @app.task(name=RUN_JOB_TASK, bind=True, max_retries=None)
    def run_job(task, job_id: str) -> None:
        try:
            outcome = runner.run(job_id, on_claim=lambda: _acknowledge(task.request.id))
        except Exception:
            # Celery acknowledges a task that raised: the job would keep no message and stay
            # queued for ever. Put it back instead (a job already claimed drops it).
            log.exception("job %s: running its message failed; it goes back to the queue", job_id)
            outcome = "busy"
        if outcome in ("busy", "elsewhere"):
            # Not enough devices free here now for the job first in line (or ever, but another
            # live worker has enough): hand the message back, for us later or another worker.
            # The pause is taken here, not as a retry countdown: a message with an ETA is held
            # by the worker that fetched it, and would wait for this worker's threads even while
            # another worker has devices free.
            time.sleep(RETRY_PAUSE_SECONDS)
            raise task.retry(countdown=0)  # 0: published with no ETA, to the back of the queue

    return app


def _acknowledge(task_id: str) -> None:
    """Acknowledge a running task's message now, not when the task returns (task_acks_late):
    once its job is claimed, the SQL lease covers it. A job runs for hours; an unacknowledged
    message meanwhile is restored at every broker reconnect, and kombu's restore on a lost
    connection could crash the whole worker (AttributeError in _connparams: the chaos run saw all
    three workers exit at Redis restarts). Celery skips its own acknowledgement later."""
    for request in list(worker_state.active_requests):
        if request.id == task_id:
            request.acknowledge()


def _job_runner(
    settings: Settings,
    pool: DevicePool,
    hostname: str,
    client: redis.Redis,
    address: str,
    send_again: Callable[[str], None],
) -> JobRunner:
    # The worker changes jobs too (claim, join, requeue): its changes reach pollers' ETags.
    engine = make_engine(settings.sql_url, timeout_seconds=settings.sql_timeout_seconds)
    sessions = make_session_factory(engine, JobCacheWriter(client, settings.keys))
    return JobRunner(
        settings,
        sessions,
        pool,
        hostname,
        send_again,
        live_workers=lambda: live_workers(client, settings.keys.workers, settings.worker_lost_seconds),
        reporter=lambda job_id, attempt: EventReporter(client, settings.keys.events, job_id, attempt),
        notices=StateNotices(settings.redis_url, settings.namespace).start(),
        address=address,
        sandbox=sandbox_options(settings),
    )


def sandbox_options(settings: Settings) -> SandboxOptions | None:
    """How this worker's launchers sandbox ranks; None where it does not (TRAINJOBS_SANDBOX=off, or
    the tools or root are missing: then jobs with their own code wait for a worker that can).
    TRAINJOBS_SANDBOX=required and no sandbox: the worker does not start."""
    if settings.sandbox == "off":
        return None
    missing = unavailable_because()
    if missing is not None:
        if settings.sandbox == "required":
            raise SystemExit(f"TRAINJOBS_SANDBOX=required, but this worker cannot sandbox jobs: {missing}")
        log.warning("no sandbox on this worker (%s): jobs with their own code will not run here", missing)
        return None
    return SandboxOptions(
        slots=settings.run_path / "slots",
        data_root=settings.data_root_path,
        max_processes=settings.sandbox_max_processes,
        max_file_bytes=settings.job_disk_bytes,
        device_root=settings.device_root,
        driver_proc=settings.nvidia_driver_proc,
    )


def run_worker(settings: Settings, pool: DevicePool, hostname: str | None = None, address: str | None = None) -> None:
    """`address`: where other hosts reach this worker's ranks [the address of this host's route
    to Redis]."""
    hostname = hostname or socket.gethostname()
    address = address or wait_for_route(settings.redis_url)
    client = redis_client(settings)
    app = create_worker_app(settings, pool, hostname, client, address)
    print(f"worker {hostname}: {pool.size} {pool.kind} slot(s); other hosts reach its ranks at {address}", flush=True)
    sandboxed = sandbox_options(settings) is not None
    Heartbeat(client, settings.keys.workers, hostname, pool, settings.heartbeat_seconds, sandboxed).start()
    app.worker_main(
        [
            "worker",
            "--pool=threads",
            f"--concurrency={pool.size}",
            f"--queues={settings.keys.run_queue(pool.kind)}",
            f"--hostname={settings.namespace}@{hostname}",
            "--loglevel=INFO",
            "--without-gossip",
            "--without-mingle",
            # Celery's own heartbeat is an event published every 2 s for monitors (Flower), which
            # nothing here reads: the worker's liveness is its Heartbeat above. While a job
            # trains, each publish wakes the worker and Redis on a core a rank needs.
            "--without-heartbeat",
        ]
    )
