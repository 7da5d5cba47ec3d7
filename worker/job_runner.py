"""What the worker does with one run message: claim the job, lease devices, start the launcher,
keep the job's lease alive until the launcher ends, then free the devices."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from pathlib import Path

from sqlalchemy.orm import Session, sessionmaker

from service.db import transaction
from service.repositories import checkpoints, jobs
from trainjobs.contract.events import StateChange
from trainjobs.contract.run import RunRequest
from trainjobs.contract.spec import JobSpec
from trainjobs.settings import Settings
from worker.devices import DevicePool
from worker.reporter import EventReporter

log = logging.getLogger(__name__)


class JobRunner:
    def __init__(self, settings: Settings, sessions: sessionmaker[Session], pool: DevicePool, hostname: str):
        self.settings = settings
        self.sessions = sessions
        self.pool = pool
        self.hostname = hostname

    def run(self, job_id: str) -> str:
        """Returns what happened: "ran", "dropped" or "busy" (no devices free; try again later)."""
        with transaction(self.sessions) as session:
            job = jobs.get(session, job_id)
            if job is None:
                log.warning("message for unknown job %s dropped", job_id)
                return "dropped"
            if job.state != "queued":
                log.info("message for job %s dropped: it is %s", job_id, job.state)
                return "dropped"
            # DataParallel runs one process but drives all `gpus` devices: lease them all.
            needed = job.spec["gpus"]
            if needed > self.pool.size:
                job.waiting_reason = (f"needs {needed} {self.pool.kind} devices; "
                                      f"worker {self.hostname} has {self.pool.size}")
                log.warning("job %s: %s", job_id, job.waiting_reason)
                return "dropped"
        lease = self.pool.lease_devices(needed)
        if lease is None:
            return "busy"
        try:
            with transaction(self.sessions) as session:
                job = jobs.claim(session, job_id, self.hostname, self.settings.lease_seconds)
                if job is None:
                    log.info("job %s was claimed elsewhere; message dropped", job_id)
                    return "dropped"
                attempt = job.attempt
                try:
                    request = self._run_request(session, job, list(lease.ids))
                except LookupError as error:
                    request = None
                    missing = str(error)
            if request is None:
                self._report(job_id, attempt, StateChange(state="failed", stop_reason="error", error=missing))
                return "ran"
            self._launch_and_wait(request)
            return "ran"
        finally:
            self.pool.release(lease)

    def _run_request(self, session: Session, job, devices: list[int]) -> RunRequest:
        spec = JobSpec.model_validate(job.spec)
        run_path = self.settings.run_path / job.id / f"attempt{job.attempt}"
        run_path.mkdir(parents=True, exist_ok=True)
        return RunRequest(
            job_id=job.id, attempt=job.attempt, spec=spec,
            devices=devices if spec.device == "cuda" else [],
            run_dir=str(run_path), checkpoint_dir=str(self.settings.checkpoint_path),
            data_root=str(self.settings.data_root_path),
            redis_url=self.settings.redis_url, events_stream=self.settings.events_stream,
            resume_path=_checkpoint_path(session, spec.resume_from),
            init_path=_checkpoint_path(session, spec.init_from),
            process_group_timeout_seconds=self.settings.process_group_timeout_seconds,
        )

    def _launch_and_wait(self, request: RunRequest) -> None:
        request_file = request.run_path / "request.json"
        request_file.write_text(request.model_dump_json())
        env = dict(os.environ)
        if request.devices:
            env["CUDA_VISIBLE_DEVICES"] = ",".join(map(str, request.devices))
        with open(request.run_path / "launcher.log", "ab") as launcher_log:
            launcher = subprocess.Popen(
                [sys.executable, "-m", "worker.launcher", str(request_file), str(os.getpid())],
                stdout=launcher_log, stderr=subprocess.STDOUT, env=env, start_new_session=True,
            )
        log.info("job %s attempt %d: launcher pid %d", request.job_id, request.attempt, launcher.pid)
        renew_every = self.settings.lease_seconds / 3
        while True:
            try:
                launcher.wait(timeout=renew_every)
                break
            except subprocess.TimeoutExpired:
                pass
            with transaction(self.sessions) as session:
                still_ours = jobs.renew_lease(session, request.job_id, self.hostname, self.settings.lease_seconds)
            if not still_ours:
                log.warning("job %s: lease lost; ending its launcher", request.job_id)
                os.killpg(launcher.pid, signal.SIGKILL)
                launcher.wait()
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


def _checkpoint_path(session: Session, checkpoint_id: str | None) -> str | None:
    if checkpoint_id is None:
        return None
    row = checkpoints.get(session, checkpoint_id)
    if row is None:
        raise LookupError(f"checkpoint {checkpoint_id} no longer exists (rotated out or deleted)")
    return row.path
