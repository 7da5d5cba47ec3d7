"""Watching a running job: the worker's side of its lease, from the launcher's start to its end.

The watch sleeps on one event. It wakes when the launcher exits, when a notice says the job's
state changed (cancel, preempt: trainjobs.worker.state_notices), or when the lease is due for renewal
(every third of `lease_seconds`). Only then does it read SQL. The ranks share the host with the
worker, and a watch that read SQL every second cost them CPU for nothing.

SQL may fail at a renewal (SQLite locked past its busy timeout, PostgreSQL restarting, a
half-open connection): the renewal is tried again with back-off until the lease it last renewed
is about to run out. Then the launcher's process group is ended, before the watch returns and
the worker frees the job's devices, never after: once the lease has run out the service hands
the job to another attempt, and this one must be gone by then.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.run import RunRequest
from trainjobs.contract.states import TERMINAL_STATES
from trainjobs.jobs import worker_gateway
from trainjobs.jobs.db import transaction
from trainjobs.worker import supervision

log = logging.getLogger(__name__)

RETRY_FIRST_SECONDS = 0.5
RETRY_MAX_SECONDS = 4.0
# Ending a launcher's group takes up to two grace periods (SIGTERM, then SIGKILL): start that
# early enough to be done before the lease runs out.
END_MARGIN_SECONDS = 2 * supervision.TERMINATE_GRACE_SECONDS


@dataclass(frozen=True)
class WatchOutcome:
    """How the watch ended: "exited" (the launcher ended by itself), "finished" (the job ended
    and its launcher was let finish), "cancelled", "lost" (the lease is another's), or
    "unreachable" (SQL did not answer before the lease ran out)."""

    how: str


class JobWatch:
    def __init__(self, sessions: sessionmaker[Session], hostname: str, lease_seconds: float):
        self.sessions = sessions
        self.hostname = hostname
        self.lease_seconds = lease_seconds

    def watch(
        self,
        request: RunRequest,
        launcher: subprocess.Popen[bytes],
        woken: threading.Event,
        report_cancelled: Callable[[], None],
        preempted: Callable[[], None] = lambda: None,
    ) -> WatchOutcome:
        """Keep the lease and follow the job until its launcher is over; the launcher's process
        group never outlives this call, whatever is raised. `preempted` is called once the job
        is asked to stop for another (the worker warms a launcher for it meanwhile)."""
        try:
            return self._follow(request, launcher, woken, report_cancelled, preempted)
        finally:
            if launcher.poll() is None:
                supervision.end_process_group(launcher)

    def _follow(
        self,
        request: RunRequest,
        launcher: subprocess.Popen[bytes],
        woken: threading.Event,
        report_cancelled: Callable[[], None],
        preempted: Callable[[], None],
    ) -> WatchOutcome:
        renewed_at = time.monotonic()  # the claim took the lease
        next_renewal = renewed_at + self.lease_seconds / 3
        asked_to_stop = False
        while True:
            woken.wait(max(0.0, next_renewal - time.monotonic()))
            woken.clear()  # before reading: a notice from here on wakes the next wait
            if launcher.poll() is not None:
                return WatchOutcome("exited")
            renew = time.monotonic() >= next_renewal
            lease = self._check(request, renew, expires=renewed_at + self.lease_seconds)
            if lease is None:
                log.error("job %s: SQL did not answer before the lease ran out; ending its launcher", request.job_id)
                return WatchOutcome("unreachable")
            if renew:
                renewed_at, next_renewal = time.monotonic(), time.monotonic() + self.lease_seconds / 3
            if lease.state in TERMINAL_STATES and lease.same_attempt:
                # The launcher reported the end (and the collector applied it) a moment before
                # exiting: let it finish.
                supervision.wait_or_end(launcher)
                return WatchOutcome("finished")
            if not lease.ours:
                log.warning("job %s: lease lost (taken over or requeued); ending its launcher", request.job_id)
                return WatchOutcome("lost")
            if lease.state == "preempting" and not asked_to_stop:
                asked_to_stop = _stop_for_preemption(request, launcher)
                preempted()
            if lease.state == "cancelling":
                supervision.end_process_group(launcher)
                if request.node_rank == 0:  # one report for the whole job
                    report_cancelled()
                log.info("job %s cancelled", request.job_id)
                return WatchOutcome("cancelled")

    def _check(self, request: RunRequest, renew: bool, expires: float) -> worker_gateway.LeaseCheck | None:
        """Where the job stands (renewing the lease if `renew`), tried again with back-off while SQL
        fails; None once the lease would run out before another try could end the launcher."""
        pause = RETRY_FIRST_SECONDS
        while True:
            try:
                with transaction(self.sessions) as session:
                    return worker_gateway.check_lease(
                        session, request.job_id, self.hostname, request.attempt, self.lease_seconds if renew else None
                    )
            except SQLAlchemyError as error:
                if time.monotonic() + pause > expires - min(END_MARGIN_SECONDS, self.lease_seconds / 3):
                    return None
                log.warning("job %s: lease check failed (%s); trying again in %.1f s", request.job_id, error, pause)
                time.sleep(pause)
                pause = min(pause * 2, RETRY_MAX_SECONDS)


def _stop_for_preemption(request: RunRequest, launcher: subprocess.Popen[bytes]) -> bool:
    """Its rank 0 checkpoints at the step it is in and the ranks stop; the launcher reports that,
    and the job goes back to the queue. The watch goes on meanwhile."""
    supervision.ask_to_stop(launcher)
    log.info("job %s is preempted: its ranks stop at their next step", request.job_id)
    return True


class LeaseKeeper:
    """Renews a claimed job's lease from a thread of its own while the worker prepares the job
    (downloads its code, installs its requirements) before its watch starts."""

    def __init__(self, sessions: sessionmaker[Session], hostname: str, job_id: str, attempt: int, lease_seconds: float):
        self.sessions = sessions
        self.hostname = hostname
        self.job_id = job_id
        self.attempt = attempt
        self.lease_seconds = lease_seconds
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renew, name=f"lease-{job_id}", daemon=True)

    def __enter__(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _renew(self) -> None:
        while not self._stop.wait(self.lease_seconds / 3):
            try:
                with transaction(self.sessions) as session:
                    worker_gateway.check_lease(session, self.job_id, self.hostname, self.attempt, self.lease_seconds)
            except SQLAlchemyError as error:
                log.warning("job %s: lease not renewed while preparing (%s)", self.job_id, error)
