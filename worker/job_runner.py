"""What the worker does with one run message: pick the job first in line, lease devices, claim
it, start its launcher, keep its lease alive (and watch for cancel) until the launcher ends, free
the devices.

While a job trains, trainjobs.worker.job_watch keeps its lease and follows it; the devices are
freed only once the watch has ended the launcher's process group.

The scheduling rule is trainjobs.jobs.scheduling's; SQL is reached only through
trainjobs.jobs.worker_gateway; the launcher process is trainjobs.worker.supervision's.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, ExitStack, nullcontext
from pathlib import Path

from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.events import MAX_LOG_LINE_CHARS, MAX_LOG_LINES_PER_EVENT, LogLines, StateChange
from trainjobs.contract.run import RunRequest
from trainjobs.contract.spec import JobSpec
from trainjobs.contract.workers import WorkerStatus
from trainjobs.jobs import worker_gateway
from trainjobs.jobs.db import transaction
from trainjobs.jobs.scheduling import QueuedJob, waiting_reason
from trainjobs.jobs.sharing import Rules
from trainjobs.settings import Settings
from trainjobs.store import CheckpointStore
from trainjobs.worker import run_folders, supervision
from trainjobs.worker.code_cache import CodeCache, CodeFailed, PreparedCode
from trainjobs.worker.devices import DevicePool, core_share
from trainjobs.worker.job_watch import JobWatch, LeaseKeeper
from trainjobs.worker.network import interface_of
from trainjobs.worker.reporter import EventReporter
from trainjobs.worker.sandbox import SandboxUsers
from trainjobs.worker.slot import SETUP_LOG
from trainjobs.worker.state_notices import StateNotices

log = logging.getLogger(__name__)

POLL_SECONDS = 1.0  # how often a gathering multi-node job's nodes are read


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
        notices: StateNotices | None = None,
        address: str = "127.0.0.1",
        sandbox: supervision.SandboxOptions | None = None,
    ):
        self.settings = settings
        self.sessions = sessions
        self.pool = pool
        self.hostname = hostname
        self.send_again = send_again  # publishes a new run message for a job id
        self.live_workers = live_workers  # the fleet, as its heartbeats describe it
        self.reporter = reporter  # an event reporter for (job id, attempt)
        self.notices = notices  # wakes a running job's watch on a change of its state (None: renewals only)
        self.address = address  # where other hosts reach this one's ranks (a multi-node job's node 0 serves there)
        self.socket_ifname = interface_of(address)
        self.sandbox = sandbox  # how launchers sandbox ranks; None: not here (jobs with their own code wait)
        self.launchers = supervision.LauncherPool(settings.run_path / "launchers.log", settings.warm_launchers, sandbox)
        self.watch = JobWatch(sessions, hostname, settings.lease_seconds)
        self._next_folder_sweep = 0.0  # monotonic: old attempts' folders are looked for after the first job
        self.code = CodeCache(
            settings.home / "code-cache",
            CheckpointStore(settings.checkpoint_store),
            settings.code_cache_bytes,
            settings.code_max_unpacked_bytes,
            SandboxUsers(sandbox.slots / "users") if sandbox else None,
        )
        self.launchers.replenish()

    def run(self, job_id: str, on_claim: Callable[[], None] = lambda: None) -> str:
        """What happened: "ran", "dropped", or "busy" / "elsewhere" (hand the message back).

        A message is a wake-up more than an order: the job run is the one the sharing rule
        (trainjobs.jobs.sharing) places on this worker now, which may be another than the
        message's own; the message's job then gets a new message.
        """
        with transaction(self.sessions) as session:
            view = worker_gateway.view_message(session, job_id)
        if view.job is None:
            return _dropped(job_id, view.state)
        fleet = self._fleet()
        if not self._could_ever_run(view.job, fleet):
            return self._cannot_run_here(view.job, fleet)
        with transaction(self.sessions) as session:
            free = self.pool.size - self.pool.busy
            first = worker_gateway.next_start(session, self.hostname, self.pool.kind, fleet, self.rules(), free)
        if first is None:
            return "busy"
        if self._refused(first.id):
            return "dropped" if first.id == job_id else "busy"  # busy: this job's turn comes round again
        lease = self.pool.lease_devices(first.needed, first.id)
        if lease is None:
            return "busy"
        try:
            if first.id != job_id:
                log.info("job %s starts here before job %s; job %s gets a new message", first.id, job_id, job_id)
                self.send_again(job_id)
            return self._claim_and_run(first, list(lease.ids), on_claim)
        finally:
            # The watch has ended the launcher's process group by now, whatever happened to it.
            self.pool.release(lease)
            self._wake_next()
            self._remove_old_run_folders()

    def _remove_old_run_folders(self) -> None:
        """At most once an hour, after a job: the logs of attempts long over."""
        if time.monotonic() < self._next_folder_sweep:
            return
        self._next_folder_sweep = time.monotonic() + 3600
        try:
            run_folders.remove_old(self.settings.run_path, self.settings.run_folders_keep_days * 86400)
        except Exception:  # housekeeping only
            log.exception("could not remove old run folders")

    def _wake_next(self) -> None:
        """Devices came free here: a message for the job the rule now places here, so it does not
        wait for its own message's next turn (a duplicate claims nothing)."""
        try:
            with transaction(self.sessions) as session:
                free = self.pool.size - self.pool.busy
                then = worker_gateway.next_start(
                    session, self.hostname, self.pool.kind, self._fleet(), self.rules(), free
                )
            if then is not None:
                self.send_again(then.id)
        except Exception:  # a wake-up only: its message comes round anyway
            log.exception("could not look for the next job to start here")

    def rules(self) -> Rules:
        settings = self.settings
        return Rules(time.time(), settings.preempt_min_runtime_seconds, settings.preemption)

    def _fleet(self) -> list[WorkerStatus]:
        """The live workers, this one among them as it is now (before its first heartbeat too)."""
        others = [worker for worker in self.live_workers() if worker.hostname != self.hostname]
        here = WorkerStatus(
            hostname=self.hostname,
            device=self.pool.kind,
            slots=self.pool.size,
            busy=self.pool.busy,
            jobs=self.pool.jobs(),
            last_seen=time.time(),
            sandbox=self.sandbox is not None,
        )
        return [*others, here]

    def _could_ever_run(self, job: QueuedJob, fleet: list[WorkerStatus]) -> bool:
        if job.needed > self.pool.size or (job.own_code and self.sandbox is None):
            return False
        return job.nodes == 1 or waiting_reason(job.device, job.needed, fleet, job.nodes, job.own_code) is None

    def _claim_and_run(self, job: QueuedJob, devices: list[int], on_claim: Callable[[], None]) -> str:
        claimed = self._claim(job)
        if isinstance(claimed, str):
            return claimed
        on_claim()  # the lease covers the job from here: its message has done its work
        if claimed.missing_checkpoint is not None:
            if claimed.node_rank == 0:
                failed = StateChange(state="failed", stop_reason="error", error=claimed.missing_checkpoint)
                self._report(claimed.id, claimed.attempt, failed)
            return "ran"
        run_path = self.settings.run_path / claimed.id / f"attempt{claimed.attempt}"
        run_path.mkdir(parents=True, exist_ok=True)
        with ExitStack() as held:
            try:
                code = self._prepared_code(claimed, run_path, held)
            except CodeFailed as failed:
                self._setup_failed(claimed, run_path, str(failed))
                return "ran"
            try:
                self._launch_and_watch(self._run_request(claimed, devices, run_path, code))
            finally:
                self.launchers.replenish()  # the next job's launcher warms while the slot is idle
        return "ran"

    def _prepared_code(
        self, claimed: worker_gateway.ClaimedJob, run_path: Path, held: ExitStack
    ) -> PreparedCode | None:
        """The job's own code from the cache (downloaded, unpacked, its requirements installed if
        need be), held in the cache until `held` closes; the lease is kept meanwhile."""
        code = claimed.spec.get("code")
        if code is None:
            return None
        with LeaseKeeper(self.sessions, self.hostname, claimed.id, claimed.attempt, self.settings.lease_seconds):
            return held.enter_context(self.code.prepared(code, run_path / SETUP_LOG))

    def _setup_failed(self, claimed: worker_gateway.ClaimedJob, run_path: Path, error: str) -> None:
        """The job cannot run its code: it fails saying why (never retried), with pip's output in its logs."""
        log.warning("job %s: %s", claimed.id, error)
        reporter = self.reporter(claimed.id, claimed.attempt)
        setup = run_path / SETUP_LOG
        lines = setup.read_text(errors="replace").splitlines() if setup.is_file() else []
        for start in range(0, len(lines), MAX_LOG_LINES_PER_EVENT):
            batch = [line[:MAX_LOG_LINE_CHARS] for line in lines[start : start + MAX_LOG_LINES_PER_EVENT]]
            reporter.send(LogLines(rank=0, first_line=start, lines=batch))
        reporter.send(StateChange(state="failed", stop_reason="error", error=error))

    def _claim(self, job: QueuedJob) -> worker_gateway.ClaimedJob | str:
        """The job, claimed for this worker (or this worker's node of it): or why not."""
        if job.nodes > 1:
            return self._gather(job)
        with transaction(self.sessions) as session:
            claimed = worker_gateway.claim(session, job.id, self.hostname, self.settings.lease_seconds)
        if claimed is None:
            log.info("job %s was claimed elsewhere; message dropped", job.id)
            return "dropped"
        return claimed

    def _gather(self, job: QueuedJob) -> worker_gateway.ClaimedJob | str:
        """Hold a node of a multi-node job, with this worker's devices leased, until every node
        is held (the job then runs: each worker starts its node) or `node_gather_seconds` pass
        (the node is given back and the message handed back)."""
        lease_seconds = self.settings.lease_seconds
        with transaction(self.sessions) as session:
            held = worker_gateway.join(session, job.id, self.hostname, self.address, lease_seconds)
        if held.node_rank is None:
            return "dropped"
        if held.started is not None:
            return held.started
        log.info("job %s: holding node %d of %d; waking another worker", job.id, held.node_rank, job.nodes)
        self.send_again(job.id)
        deadline = time.monotonic() + self.settings.node_gather_seconds
        while time.monotonic() < deadline:
            time.sleep(POLL_SECONDS / 2)
            with transaction(self.sessions) as session:
                held = worker_gateway.gathering(session, job.id, held.attempt, self.hostname, lease_seconds)
            if held.started is not None:
                return held.started
            if held.node_rank is None:
                return "dropped"
        with transaction(self.sessions) as session:
            worker_gateway.leave(session, job.id, held.attempt, self.hostname)
        log.info(
            "job %s: its nodes did not gather in %.0f s; node given back", job.id, self.settings.node_gather_seconds
        )
        return "busy"

    def _refused(self, job_id: str) -> bool:
        """Whether the job the rule placed here fails before it is claimed: this worker's catalog
        cannot build its spec (a model or dataset plugin the API has is not installed here, or the
        API runs a newer contract). The API and its workers are meant to share one catalog; a
        mismatch is told at once, naming this worker, rather than claimed and left running."""
        with transaction(self.sessions) as session:
            spec = worker_gateway.queued_spec(session, job_id)
            if spec is None:
                return False
            try:
                JobSpec.model_validate(spec)
            except ValidationError as invalid:
                reason = invalid.errors()[0]["msg"].removeprefix("Value error, ")
                error = (
                    f"worker {self.hostname} cannot build this spec ({reason}): install the same model "
                    "and dataset plugins on the workers as on the API"
                )
                worker_gateway.refuse(session, job_id, error)
                log.warning("job %s refused: %s", job_id, error)
                return True
        return False

    def _cannot_run_here(self, job: QueuedJob, fleet: list[WorkerStatus]) -> str:
        reason = waiting_reason(job.device, job.needed, fleet, job.nodes, job.own_code)
        if reason is None:
            return "elsewhere"  # too big for this worker, but another live one fits
        with transaction(self.sessions) as session:
            worker_gateway.explain_waiting(session, job.id, reason)
        log.warning("job %s: %s", job.id, reason)
        return "dropped"

    def _run_request(
        self, claimed: worker_gateway.ClaimedJob, devices: list[int], run_path: Path, code: PreparedCode | None
    ) -> RunRequest:
        spec = JobSpec.model_validate(claimed.spec)
        return RunRequest(
            job_id=claimed.id,
            attempt=claimed.attempt,
            spec=spec,
            devices=devices if spec.device == "cuda" else [],
            run_dir=str(run_path),
            checkpoint_dir=self.settings.checkpoint_store,
            data_root=str(self.settings.data_root_path),
            redis_url=self.settings.redis_url,
            events_stream=self.settings.keys.events,
            resume_path=claimed.resume_path,
            init_path=claimed.init_path,
            nodes=spec.nodes,
            node_rank=claimed.node_rank,
            hostname=self.hostname,
            address=self.address,
            rendezvous_key=(self.settings.keys.rendezvous(claimed.id, claimed.attempt) if spec.nodes > 1 else None),
            rendezvous_host=claimed.leader_address,
            socket_ifname=self.socket_ifname,
            process_group_timeout_seconds=self.settings.process_group_timeout_seconds,
            threads_per_rank=core_share(self.pool.size),
            progress_interval_seconds=self.settings.progress_seconds,
            log_lines_cap=self.settings.log_lines_per_job,
            code_dir=str(code.archive) if code else None,
            packages_dir=str(code.packages) if code and code.packages else None,
        )

    def _launch_and_watch(self, request: RunRequest) -> None:
        with self._notices_for(request.job_id) as woken:
            launcher = self.launchers.start_launcher(request)
            log.info("job %s attempt %d: launcher pid %d", request.job_id, request.attempt, launcher.pid)
            supervision.on_exit(launcher, woken.set)
            cancelled = StateChange(state="cancelled", stop_reason="cancelled")
            outcome = self.watch.watch(
                request,
                launcher,
                woken,
                lambda: self._report(request.job_id, request.attempt, cancelled),
                preempted=self.launchers.replenish,  # the job it makes room for will want a warm launcher
            )
        if outcome.how == "exited" and launcher.returncode != 0:
            # The launcher reports the final state itself; it exits non-zero only when it could not.
            error = f"launcher exited with code {launcher.returncode}; see launcher.log of attempt {request.attempt}"
            self._report(request.job_id, request.attempt, StateChange(state="failed", stop_reason="error", error=error))

    def _notices_for(self, job_id: str) -> AbstractContextManager[threading.Event]:
        if self.notices is None:
            return nullcontext(threading.Event())  # never set: the watch wakes to renew only
        return self.notices.watch(job_id)

    def _report(self, job_id: str, attempt: int, change: StateChange) -> None:
        self.reporter(job_id, attempt).send(change)


def _dropped(job_id: str, state: str | None) -> str:
    if state is None:
        log.warning("message for unknown job %s dropped", job_id)
    else:
        log.info("message for job %s dropped: it is %s", job_id, state)
    return "dropped"
