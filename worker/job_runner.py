"""What the worker does with one run message: pick the job first in line, lease devices, claim
it, start its launcher, keep its lease alive (and watch for cancel) until the launcher ends, free
the devices.

The scheduling rule is trainjobs.scheduling's; SQL is reached only through
trainjobs.service.worker_gateway; the launcher process is trainjobs.worker.supervision's.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.events import TERMINAL_STATES, StateChange
from trainjobs.contract.run import RunRequest
from trainjobs.contract.spec import JobSpec
from trainjobs.contract.workers import WorkerStatus
from trainjobs.scheduling import QueuedJob, first_in_line, waiting_reason
from trainjobs.service import worker_gateway
from trainjobs.service.db import transaction
from trainjobs.settings import Settings
from trainjobs.worker import supervision
from trainjobs.worker.devices import DevicePool, core_share
from trainjobs.worker.reporter import EventReporter

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # how often a running job's state is read (cancel ends it within ~1 s)


class JobRunner:
    def __init__(
        self,
        settings: Settings,
        sessions: sessionmaker[Session],
        pool: DevicePool,
        hostname: str,
        send_again: Callable[[str], None],
        live_workers: Callable[[], list[WorkerStatus]],
        reporter: Callable[[str, int], EventReporter],
    ):
        self.settings = settings
        self.sessions = sessions
        self.pool = pool
        self.hostname = hostname
        self.send_again = send_again  # publishes a new run message for a job id
        self.live_workers = live_workers  # the fleet, as its heartbeats describe it
        self.reporter = reporter  # an event reporter for (job id, attempt)

    def run(self, job_id: str) -> str:
        """What happened: "ran", "dropped", or "busy" / "elsewhere" (hand the message back).

        A message is a wake-up more than an order: the job run is the one first in line
        (trainjobs.scheduling), which is the message's own job unless an older one waits.
        """
        with transaction(self.sessions) as session:
            view = worker_gateway.view_message(session, job_id)
        if view.job is None:
            if view.state is None:
                log.warning("message for unknown job %s dropped", job_id)
            else:
                log.info("message for job %s dropped: it is %s", job_id, view.state)
            return "dropped"
        if view.job.needed > self.pool.size:
            return self._too_big_for_this_worker(view.job)
        first = first_in_line(view.job, view.older, self.pool.size)
        lease = self.pool.lease_devices(first.needed, first.id)
        if lease is None:
            return "busy"
        try:
            if first.id != job_id:
                log.info("job %s goes before job %s (older); job %s gets a new message", first.id, job_id, job_id)
                self.send_again(job_id)
            with transaction(self.sessions) as session:
                claimed = worker_gateway.claim(session, first.id, self.hostname, self.settings.lease_seconds)
            if claimed is None:
                log.info("job %s was claimed elsewhere; message dropped", first.id)
                return "dropped"
            if claimed.missing_checkpoint is not None:
                self._report(
                    claimed.id,
                    claimed.attempt,
                    StateChange(state="failed", stop_reason="error", error=claimed.missing_checkpoint),
                )
                return "ran"
            self._launch_and_watch(self._run_request(claimed, list(lease.ids)))
            return "ran"
        finally:
            self.pool.release(lease)

    def _too_big_for_this_worker(self, job: QueuedJob) -> str:
        reason = waiting_reason(job.device, job.needed, self.live_workers())
        if reason is None:
            return "elsewhere"
        with transaction(self.sessions) as session:
            worker_gateway.explain_waiting(session, job.id, reason)
        log.warning("job %s: %s", job.id, reason)
        return "dropped"

    def _run_request(self, claimed: worker_gateway.ClaimedJob, devices: list[int]) -> RunRequest:
        spec = JobSpec.model_validate(claimed.spec)
        run_path = self.settings.run_path / claimed.id / f"attempt{claimed.attempt}"
        run_path.mkdir(parents=True, exist_ok=True)
        return RunRequest(
            job_id=claimed.id,
            attempt=claimed.attempt,
            spec=spec,
            devices=devices if spec.device == "cuda" else [],
            run_dir=str(run_path),
            checkpoint_dir=self.settings.checkpoint_store,
            data_root=str(self.settings.data_root_path),
            redis_url=self.settings.redis_url,
            events_stream=self.settings.events_stream,
            resume_path=claimed.resume_path,
            init_path=claimed.init_path,
            process_group_timeout_seconds=self.settings.process_group_timeout_seconds,
            threads_per_rank=core_share(self.pool.size),
        )

    def _launch_and_watch(self, request: RunRequest) -> None:
        launcher = supervision.start_launcher(request)
        log.info("job %s attempt %d: launcher pid %d", request.job_id, request.attempt, launcher.pid)
        renew_every = self.settings.lease_seconds / 3
        next_renewal = time.monotonic() + renew_every
        while not supervision.has_exited(launcher, POLL_SECONDS):
            renew_for = self.settings.lease_seconds if time.monotonic() >= next_renewal else None
            with transaction(self.sessions) as session:
                lease = worker_gateway.check_lease(session, request.job_id, self.hostname, request.attempt, renew_for)
            if lease.ours and renew_for is not None:
                next_renewal = time.monotonic() + renew_every
            if lease.state in TERMINAL_STATES and lease.same_attempt:
                # The launcher reported the end (and the collector applied it) a moment before
                # exiting: let it finish.
                supervision.wait_or_end(launcher)
                return
            if not lease.ours:
                log.warning("job %s: lease lost (taken over or requeued); ending its launcher", request.job_id)
                supervision.end_process_group(launcher)
                return
            if lease.state == "cancelling":
                supervision.end_process_group(launcher)
                self._report(request.job_id, request.attempt, StateChange(state="cancelled", stop_reason="cancelled"))
                log.info("job %s cancelled", request.job_id)
                return
        if launcher.returncode != 0:
            # The launcher reports the final state itself; it exits non-zero only when it could not.
            self._report(
                request.job_id,
                request.attempt,
                StateChange(
                    state="failed",
                    stop_reason="error",
                    error=f"launcher exited with code {launcher.returncode}; "
                    f"see launcher.log of attempt {request.attempt}",
                ),
            )

    def _report(self, job_id: str, attempt: int, change: StateChange) -> None:
        self.reporter(job_id, attempt).send(change)
