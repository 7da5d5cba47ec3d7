"""What the worker does with one run message: claim the job, lease devices, start the launcher,
keep the job's lease alive (and watch for cancel) until the launcher ends, free the devices."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable

import redis
from sqlalchemy.orm import Session, sessionmaker

from service import timeline
from service.db import transaction
from service.repositories import checkpoints, jobs
from trainjobs.contract.events import TERMINAL_STATES, StateChange
from trainjobs.contract.run import RunRequest
from trainjobs.contract.spec import JobSpec
from trainjobs.contract.workers import live_workers
from trainjobs.settings import Settings
from worker.devices import DevicePool, core_share
from worker.reporter import EventReporter

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0          # how often a running job's state is read (cancel ends it within ~1 s)
TERMINATE_GRACE_SECONDS = 5.0


class JobRunner:
    def __init__(self, settings: Settings, sessions: sessionmaker[Session], pool: DevicePool, hostname: str,
                 send_again: Callable[[str], None]):
        self.settings = settings
        self.sessions = sessions
        self.pool = pool
        self.hostname = hostname
        self.send_again = send_again  # publishes a new run message for a job id

    def run(self, job_id: str) -> str:
        """What happened: "ran", "dropped", or "busy" / "elsewhere" (hand the message back).

        First come, first served: the job run is the oldest queued job of this device type that
        this worker could hold, which is the message's own job unless an older one waits. While
        that one does not fit the free devices, nothing younger starts here. So a message is a
        wake-up more than an order: without this, a stream of 1-device jobs keeps every worker
        partly busy and a 2-device job never runs; and a rule that only refused younger jobs
        could leave the older job's message cycling through a full worker while an idle one
        refuses everything else.
        """
        with transaction(self.sessions) as session:
            job = jobs.get(session, job_id)
            if job is None:
                log.warning("message for unknown job %s dropped", job_id)
                return "dropped"
            if job.state != "queued":
                log.info("message for job %s dropped: it is %s", job_id, job.state)
                return "dropped"
            # DataParallel runs one process but drives all `gpus` devices: lease them all.
            if job.spec["gpus"] > self.pool.size:
                return self._too_big_for_this_worker(session, job)
            first = self._first_in_line(session, job)
            first_id, needed = first.id, first.spec["gpus"]
        lease = self.pool.lease_devices(needed, first_id)
        if lease is None:
            return "busy"
        try:
            if first_id != job_id:
                log.info("job %s goes before job %s (older); job %s gets a new message", first_id, job_id, job_id)
                self.send_again(job_id)
            with transaction(self.sessions) as session:
                job = jobs.claim(session, first_id, self.hostname, self.settings.lease_seconds)
                if job is None:
                    log.info("job %s was claimed elsewhere; message dropped", first_id)
                    return "dropped"
                timeline.state_changed(session, job)
                attempt = job.attempt
                try:
                    request = self._run_request(session, job, list(lease.ids))
                except LookupError as error:
                    request, missing = None, str(error)
            if request is None:
                self._report(first_id, attempt, StateChange(state="failed", stop_reason="error", error=missing))
                return "ran"
            self._launch_and_watch(request)
            return "ran"
        finally:
            self.pool.release(lease)

    def _first_in_line(self, session: Session, job):
        """The oldest queued job of this device type that this worker could ever hold."""
        older = (older for older in jobs.queued_before(session, job) if older.spec["gpus"] <= self.pool.size)
        return next(older, job)

    def _too_big_for_this_worker(self, session: Session, job) -> str:
        needed = job.spec["gpus"]
        if self._a_live_worker_fits(needed):
            return "elsewhere"
        job = jobs.get(session, job.id, for_update=True)
        jobs.touch(job, waiting_reason=f"needs {needed} {self.pool.kind} devices; no live worker has that many "
                                       f"(this one, {self.hostname}, has {self.pool.size})")
        timeline.state_changed(session, job)
        log.warning("job %s: %s", job.id, job.waiting_reason)
        return "dropped"

    def _a_live_worker_fits(self, needed: int) -> bool:
        client = redis.Redis.from_url(self.settings.redis_url, socket_timeout=5)
        try:
            workers = live_workers(client, self.settings.workers_key, self.settings.worker_lost_seconds)
        finally:
            client.close()
        return any(worker.device == self.pool.kind and worker.slots >= needed for worker in workers)

    def _run_request(self, session: Session, job, devices: list[int]) -> RunRequest:
        spec = JobSpec.model_validate(job.spec)
        run_path = self.settings.run_path / job.id / f"attempt{job.attempt}"
        run_path.mkdir(parents=True, exist_ok=True)
        # A later attempt (the previous worker was lost) continues from the job's last checkpoint.
        latest = checkpoints.latest_for_job(session, job.id) if job.attempt > 1 else None
        return RunRequest(
            job_id=job.id, attempt=job.attempt, spec=spec,
            devices=devices if spec.device == "cuda" else [],
            run_dir=str(run_path), checkpoint_dir=str(self.settings.checkpoint_path),
            data_root=str(self.settings.data_root_path),
            redis_url=self.settings.redis_url, events_stream=self.settings.events_stream,
            resume_path=latest.path if latest else _checkpoint_path(session, spec.resume_from),
            init_path=None if latest else _checkpoint_path(session, spec.init_from),
            process_group_timeout_seconds=self.settings.process_group_timeout_seconds,
            threads_per_rank=core_share(self.pool.size),
        )

    def _launch_and_watch(self, request: RunRequest) -> None:
        request_file = request.run_path / "request.json"
        request_file.write_text(request.model_dump_json())
        env = dict(os.environ)
        if request.devices:
            # The launcher sees the job's GPUs only; each rank narrows that to its own.
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, request.devices))
        with open(request.run_path / "launcher.log", "ab") as launcher_log:
            # A session of its own: cancel ends the launcher, its ranks and their loader workers
            # as one process group.
            launcher = subprocess.Popen(
                [sys.executable, "-m", "worker.launcher", str(request_file), str(os.getpid())],
                stdout=launcher_log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        log.info("job %s attempt %d: launcher pid %d", request.job_id, request.attempt, launcher.pid)
        renew_every = self.settings.lease_seconds / 3
        next_renewal = time.monotonic() + renew_every
        while True:
            try:
                launcher.wait(timeout=POLL_SECONDS)
                break
            except subprocess.TimeoutExpired:
                pass
            with transaction(self.sessions) as session:
                job = jobs.get(session, request.job_id, for_update=True)
                ours = job is not None and job.lease_owner == self.hostname and job.attempt == request.attempt
                state = job.state if job is not None else None
                if ours and time.monotonic() >= next_renewal:
                    jobs.renew_lease(session, request.job_id, self.hostname, request.attempt,
                                     self.settings.lease_seconds)
                    next_renewal = time.monotonic() + renew_every
            if state in TERMINAL_STATES and job.attempt == request.attempt:
                # The launcher reported the end (and the collector applied it) a moment before
                # exiting: let it finish.
                _wait_or_end(launcher, TERMINATE_GRACE_SECONDS)
                return
            if not ours:
                log.warning("job %s: lease lost (taken over or requeued); ending its launcher", request.job_id)
                _end_process_group(launcher)
                return
            if state == "cancelling":
                _end_process_group(launcher)
                self._report(request.job_id, request.attempt,
                             StateChange(state="cancelled", stop_reason="cancelled"))
                log.info("job %s cancelled", request.job_id)
                return
        if launcher.returncode != 0:
            # The launcher reports the final state itself; it exits non-zero only when it could not.
            self._report(request.job_id, request.attempt, StateChange(
                state="failed", stop_reason="error",
                error=f"launcher exited with code {launcher.returncode}; see {request.run_path / 'launcher.log'}"))

    def _report(self, job_id: str, attempt: int, change: StateChange) -> None:
        reporter = EventReporter(self.settings.redis_url, self.settings.events_stream, job_id, attempt)
        reporter.send(change)
        reporter.close()


def _wait_or_end(launcher: subprocess.Popen, seconds: float) -> None:
    try:
        launcher.wait(timeout=seconds)
    except subprocess.TimeoutExpired:
        _end_process_group(launcher)


def _end_process_group(launcher: subprocess.Popen) -> None:
    """SIGTERM to the launcher's whole group, SIGKILL to what is left after a grace period."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(launcher.pid, sig)
        except ProcessLookupError:
            return
        try:
            launcher.wait(timeout=TERMINATE_GRACE_SECONDS)
        except subprocess.TimeoutExpired:
            continue
        # The launcher is gone; its ranks may linger a moment in the same group.
        deadline = time.monotonic() + TERMINATE_GRACE_SECONDS
        while time.monotonic() < deadline and _group_alive(launcher.pid):
            time.sleep(0.1)
        if not _group_alive(launcher.pid):
            return


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
        return True
    except ProcessLookupError:
        return False


def _checkpoint_path(session: Session, checkpoint_id: str | None) -> str | None:
    if checkpoint_id is None:
        return None
    row = checkpoints.get(session, checkpoint_id)
    if row is None:
        raise LookupError(f"checkpoint {checkpoint_id} no longer exists (rotated out or deleted)")
    return row.path
