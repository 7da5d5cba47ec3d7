"""Watching a running job: the worker's side of its lease, from the launcher's start to its end.

The watch sleeps on one event. It wakes when the launcher exits, when a notice says the job's
state changed (cancel, preempt: trainjobs.worker.state_notices), or when the lease is due for renewal
(every third of `lease_seconds`). Only then does it read SQL. The ranks share the host with the
worker, and a watch that read SQL every second cost them CPU for nothing.

SQL may fail at a renewal (SQLite locked past its busy timeout, PostgreSQL restarting, a
half-open connection), or not answer at all for a while (a write lock held): the renewal is tried
again with back-off until the lease it last renewed is about to run out, and no answer is waited
for past that. Then the launcher's process group is killed, before the watch returns and the
worker frees the job's devices, never after: once the lease has run out the service hands the job
to another attempt, and this one must be gone by then. A lease counts from the moment its renewal
was asked for, not answered: SQL sets the new expiry when the statement is made, and an answer
that comes seconds later (a lock waited for) does not move it.
"""

from __future__ import annotations

import logging
import subprocess
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
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
# Give up on SQL this long before the lease runs out (a third of it for short leases): killing
# the launcher's group and seeing it gone takes well under a second.
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
        asking = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"lease-{request.job_id}")
        try:
            return self._follow(request, launcher, woken, report_cancelled, preempted, asking)
        finally:
            asking.shutdown(wait=False)  # a question SQL has not answered is left to time out
            if launcher.poll() is None:
                supervision.end_process_group(launcher)

    def _follow(
        self,
        request: RunRequest,
        launcher: subprocess.Popen[bytes],
        woken: threading.Event,
        report_cancelled: Callable[[], None],
        preempted: Callable[[], None],
        asking: ThreadPoolExecutor,
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
            asked_at = time.monotonic()
            lease = self._check(request, renew, renewed_at + self.lease_seconds, asking)
            if lease is None:
                log.error("job %s: SQL did not answer before the lease ran out; killing its launcher", request.job_id)
                supervision.kill_process_group(launcher)
                return WatchOutcome("unreachable")
            if renew:
                renewed_at, next_renewal = asked_at, asked_at + self.lease_seconds / 3
            ended = _ended(lease, request, launcher, report_cancelled)
            if ended is not None:
                return ended
            if lease.state == "preempting" and not asked_to_stop:
                asked_to_stop = _stop_for_preemption(request, launcher)
                preempted()

    def _check(
        self, request: RunRequest, renew: bool, expires: float, asking: ThreadPoolExecutor
    ) -> worker_gateway.LeaseCheck | None:
        """Where the job stands (renewing the lease if `renew`), tried again with back-off while SQL
        fails; None once the lease would run out before another try could end the launcher, or
        when SQL has not answered by then (the question waits in a thread of its own)."""
        give_up_at = expires - min(END_MARGIN_SECONDS, self.lease_seconds / 3)
        pause = RETRY_FIRST_SECONDS
        while True:
            asked = asking.submit(self._lease_check, request, renew)
            try:
                return asked.result(timeout=max(0.0, give_up_at - time.monotonic()))
            except TimeoutError:
                return None
            except SQLAlchemyError as error:
                if time.monotonic() + pause > give_up_at:
                    return None
                log.warning("job %s: lease check failed (%s); trying again in %.1f s", request.job_id, error, pause)
                time.sleep(pause)
                pause = min(pause * 2, RETRY_MAX_SECONDS)

    def _lease_check(self, request: RunRequest, renew: bool) -> worker_gateway.LeaseCheck:
        with transaction(self.sessions) as session:
            return worker_gateway.check_lease(
                session, request.job_id, self.hostname, request.attempt, self.lease_seconds if renew else None
            )


def _ended(
    lease: worker_gateway.LeaseCheck,
    request: RunRequest,
    launcher: subprocess.Popen[bytes],
    report_cancelled: Callable[[], None],
) -> WatchOutcome | None:
    """How the watch ends for where the job stands now, its launcher's group ended; None: it goes on."""
    if lease.state in TERMINAL_STATES and lease.same_attempt:
        # The launcher reported the end (and the collector applied it) a moment before exiting:
        # let it finish.
        supervision.wait_or_end(launcher)
        return WatchOutcome("finished")
    if not lease.ours:
        # Killed, not asked: the job's next attempt may start as soon as the lease is out.
        log.warning("job %s: lease lost (taken over or requeued); killing its launcher", request.job_id)
        supervision.kill_process_group(launcher)
        return WatchOutcome("lost")
    if lease.state == "cancelling":
        supervision.end_process_group(launcher)
        if request.node_rank == 0:  # one report for the whole job
            report_cancelled()
        log.info("job %s cancelled", request.job_id)
        return WatchOutcome("cancelled")
    return None


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
