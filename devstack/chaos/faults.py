"""The chaos run's faults, one kind per method, injected at seeded random moments. The seed fixes
the order of kinds, the moments and how long each lasts; what a fault hits is the candidate at a
seeded position among those there are then (which jobs run where depends on timing, so a replay
hits the same kind of target, not always the same job)."""

from __future__ import annotations

import os
import random
import re
import signal
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path

import psycopg

from devstack.chaos.fleet import ChaosFleet
from devstack.chaos.observer import RANK_LOG
from devstack.processes import descendants

JOB_ID = re.compile(r"/(j[0-9a-f]{16})(?:/|-a)")

MEAN_SECONDS_BETWEEN_FAULTS = 6.0
KINDS = (  # in a fixed order: the seed picks among them
    "kill worker",
    "kill launcher",
    "kill rank",
    "kill API process",
    "restart Redis (persistent)",
    "restart Redis (data lost)",
    "restart PostgreSQL",
    "hold PostgreSQL's write lock",
    "cut a worker's network",
    "fill a worker's run folder",
    "kill a victim while it checkpoints",
)


@dataclass
class FaultInjector:
    fleet: ChaosFleet
    seed: int
    injected: Counter = field(default_factory=Counter)  # kind -> times it hit something
    missed: Counter = field(default_factory=Counter)  # kind -> times it found nothing to hit
    journal: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.random = random.Random(self.seed)
        self.started = time.monotonic()
        self.next_at = self.started + self._gap()
        self.pending: list[threading.Thread] = []  # faults that last a while, undone by themselves
        self.killed: set[int] = set()  # workers killed here, until they are started again
        self.exited_on_their_own: list[str] = []
        self._faults: dict[str, Callable[[float, float], str | None]] = {
            "kill worker": self._kill_worker,
            "kill launcher": self._kill_launcher,
            "kill rank": self._kill_rank,
            "kill API process": self._kill_api_process,
            "restart Redis (persistent)": partial(self._restart_redis, persistent=True),
            "restart Redis (data lost)": partial(self._restart_redis, persistent=False),
            "restart PostgreSQL": self._restart_postgresql,
            "hold PostgreSQL's write lock": self._hold_write_lock,
            "cut a worker's network": self._cut_network,
            "fill a worker's run folder": self._fill_run_folder,
            "kill a victim while it checkpoints": self._kill_victim_while_it_checkpoints,
        }

    def tick(self) -> None:
        self._restart_workers_that_exited()
        if time.monotonic() < self.next_at:
            return
        kind = self.random.choice(KINDS)
        pick, seconds = self.random.random(), self.random.uniform(2, 10)
        self.next_at = time.monotonic() + self._gap()
        try:
            target = self._faults[kind](pick, seconds)
        except Exception as error:  # the injector never stops the run; what it could not do is noted
            target = None
            self.journal.append(f"{time.monotonic() - self.started:7.1f} s  {kind} could not be injected: {error!r}")
        (self.injected if target else self.missed)[kind] += 1
        self.journal.append(f"{time.monotonic() - self.started:7.1f} s  {kind}: {target or 'nothing to hit'}")

    def _restart_workers_that_exited(self) -> None:
        """A worker that exited without being killed here broke a promise (nothing stalls): it is
        counted, and started again, as a host's supervisor would."""
        for index in range(len(self.fleet.homes)):
            if index not in self.killed and not self.fleet.worker_alive(index):
                self.exited_on_their_own.append(self.fleet.names[index])
                self.journal.append(f"{time.monotonic() - self.started:7.1f} s  {self.fleet.names[index]} exited")
                self.fleet.start_worker(index)

    def finish(self) -> None:
        """Wait for the lasting faults to be undone, then make sure every part runs again."""
        for thread in self.pending:
            thread.join(timeout=30)
        for index in range(len(self.fleet.homes)):
            self.fleet.hosts_link(index, up=True)
            if not self.fleet.worker_alive(index):
                self.fleet.start_worker(index)

    def _gap(self) -> float:
        return self.random.expovariate(1 / MEAN_SECONDS_BETWEEN_FAULTS)

    def _lasting(self, undo, seconds: float) -> None:
        def run() -> None:
            time.sleep(seconds)
            undo()

        thread = threading.Thread(target=run, daemon=True)
        thread.start()
        self.pending.append(thread)

    # ---- processes -------------------------------------------------------------------------------

    def _kill_worker(self, pick: float, seconds: float) -> str | None:
        alive = [index for index in range(len(self.fleet.homes)) if self.fleet.worker_alive(index)]
        if not alive:
            return None
        index = alive[int(pick * len(alive))]
        assert self.fleet.stack is not None
        self.killed.add(index)
        self.fleet.stack.kill_worker(self.fleet.hostname(index))

        def come_back() -> None:  # the host comes back
            self.fleet.start_worker(index)
            self.killed.discard(index)

        self._lasting(come_back, seconds)
        return f"{self.fleet.names[index]}, back after {seconds:.1f} s"

    def _kill_launcher(self, pick: float, _seconds: float) -> str | None:
        return _kill_one(self.fleet.running_launchers(), pick, "launcher")

    def _kill_rank(self, pick: float, _seconds: float) -> str | None:
        ranks = [pid for launcher in self.fleet.running_launchers() for pid in _ranks_of(launcher)]
        return _kill_one(ranks, pick, "rank")

    def _kill_api_process(self, pick: float, _seconds: float) -> str | None:
        return _kill_one(self.fleet.api_servers(), pick, "API server process")

    def _kill_victim_while_it_checkpoints(self, pick: float, _seconds: float) -> str | None:
        preempting = self._preempting_jobs()
        launchers = [launcher for launcher in self.fleet.running_launchers() if _job_of(launcher) in preempting]
        victims = [pid for launcher in launchers for pid in _ranks_of(launcher)]
        return _kill_one(victims, pick, "rank of a preempting job")

    # ---- servers -----------------------------------------------------------------------------------

    def _restart_redis(self, _pick: float, seconds: float, persistent: bool) -> str:
        redis_server = self.fleet.redis
        assert redis_server is not None
        redis_server.stop()
        if not persistent:
            for path in Path(redis_server.directory).rglob("*"):
                if path.is_file():
                    path.unlink()
        time.sleep(min(seconds, 3))
        redis_server.start()
        return f"down {min(seconds, 3):.1f} s"

    def _restart_postgresql(self, _pick: float, seconds: float) -> str:
        postgres = self.fleet.postgres
        assert postgres is not None
        postgres.crash()
        time.sleep(min(seconds, 3))
        postgres.start()
        return f"crashed, down {min(seconds, 3):.1f} s"

    def _hold_write_lock(self, _pick: float, seconds: float) -> str:
        postgres = self.fleet.postgres
        assert postgres is not None
        held = seconds + 5  # past TRAINJOBS_SQL_TIMEOUT_SECONDS (5)

        def hold() -> None:
            try:
                with psycopg.connect(f"host=127.0.0.1 port={postgres.port} user=postgres dbname=trainjobs") as db:
                    db.execute("LOCK TABLE jobs IN EXCLUSIVE MODE")  # reads go on, writes wait
                    time.sleep(held)
            except psycopg.Error:
                pass  # the server was restarted meanwhile: the lock went with it

        thread = threading.Thread(target=hold, daemon=True)
        thread.start()
        self.pending.append(thread)
        return f"jobs locked for writes {held:.1f} s"

    # ---- hosts -------------------------------------------------------------------------------------

    def _cut_network(self, pick: float, seconds: float) -> str:
        index = int(pick * len(self.fleet.homes))
        self.fleet.hosts_link(index, up=False)
        self._lasting(lambda: self.fleet.hosts_link(index, up=True), seconds)
        return f"{self.fleet.names[index]} cut off for {seconds:.1f} s"

    def _fill_run_folder(self, pick: float, seconds: float) -> str:
        index = int(pick * len(self.fleet.homes))
        filler = self.fleet.run_folder(index) / "chaos-filler"
        try:
            with open(filler, "ab", buffering=0) as out:
                while True:
                    out.write(bytes(1 << 20))
        except OSError:
            pass  # full
        self._lasting(lambda: filler.unlink(missing_ok=True), seconds)
        return f"{self.fleet.names[index]}'s run folder full for {seconds:.1f} s"

    def _preempting_jobs(self) -> set[str]:
        assert self.fleet.stack is not None
        try:
            admin = self.fleet.stack.client(self.fleet.stack.token("root", admin=True))
            listed = admin.get("/v1/jobs", params={"state": "preempting", "limit": 100}).json()["items"]
            return {job["id"] for job in listed}
        except Exception:  # the API or SQL is down (another fault): nothing to hit now
            return set()


def _kill_one(pids: list[int], pick: float, what: str) -> str | None:
    if not pids:
        return None
    pid = sorted(pids)[int(pick * len(pids))]
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    return f"{what} {pid}" + (f" of job {_job_of(pid)}" if _job_of(pid) else "")


def _ranks_of(launcher: int) -> list[int]:
    ranks = []
    for pid in descendants(launcher):
        try:
            if RANK_LOG.search(os.readlink(f"/proc/{pid}/fd/1")):
                ranks.append(pid)
        except OSError:
            continue
    return ranks


def _job_of(pid: int) -> str | None:
    """The job a launcher or rank works for, from the log its stdout points at."""
    try:
        target = os.readlink(f"/proc/{pid}/fd/1")
    except OSError:
        return None
    found = JOB_ID.search(target)
    return found[1] if found else None
