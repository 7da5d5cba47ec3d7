"""The chaos run's fleet: its own PostgreSQL and Redis, the API (two processes) and three workers,
each on a host of its own (a network namespace and a home; its run folder a small tmpfs that the
injector may fill), all reaching the servers over one bridge. Checkpoints live in a folder that
every host mounts (the shared filesystem of a real fleet)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from devstack.hosts import NetworkHosts
from devstack.processes import descendants, kill_launchers_of, launchers_matching
from devstack.servers import PrivatePostgres, PrivateRedis
from devstack.services import upgrade_to_head, wait_until
from devstack.stack import Stack

WORKERS = 3
SLOTS_PER_WORKER = 2
RUN_FOLDER_BYTES = 64 * 1024 * 1024  # each host's tmpfs for its run folder: small enough to fill
OWNERS = ("alice", "bob", "carol")

# Short leases and quick sweeps: faults are seen, and recovered from, within seconds.
FLEET_SETTINGS = {
    "TRAINJOBS_API_WORKERS": "2",
    "TRAINJOBS_LEASE_SECONDS": "6",
    "TRAINJOBS_HEARTBEAT_SECONDS": "1",
    "TRAINJOBS_WORKER_LOST_SECONDS": "5",
    "TRAINJOBS_MAX_ATTEMPTS": "20",
    "TRAINJOBS_SQL_TIMEOUT_SECONDS": "5",
    "TRAINJOBS_PREEMPT_MIN_RUNTIME_SECONDS": "3",
    "TRAINJOBS_PREEMPT_GRACE_SECONDS": "20",
    "TRAINJOBS_PROGRESS_SECONDS": "0.5",
}


class ChaosFleet:
    def __init__(self, workdir: Path):
        self.workdir = workdir
        self.hosts = NetworkHosts(WORKERS)
        self.postgres: PrivatePostgres | None = None
        self.redis: PrivateRedis | None = None
        self.stack: Stack | None = None
        self.homes = [workdir / f"host{index}" for index in range(WORKERS)]
        self.names = [f"host{index}" for index in range(WORKERS)]
        self.mounted: list[Path] = []

    # ---- bring up, take down ---------------------------------------------------------------------

    def start(self) -> ChaosFleet:
        self.hosts.create()
        gateway = self.hosts.gateway
        self.postgres = PrivatePostgres(host=gateway).start()
        upgrade_to_head(self.postgres.url)
        (self.workdir / "redis").mkdir(parents=True, exist_ok=True)
        self.redis = PrivateRedis(self.workdir / "redis", host=gateway)
        self.redis.start()
        store = self.workdir / "store"
        env = {**FLEET_SETTINGS, "TRAINJOBS_CHECKPOINT_DIR": str(store)}
        self.stack = Stack(self.workdir / "api", self.postgres.url, self.redis.url, SLOTS_PER_WORKER, **env)
        self.stack.start_api()
        for index in range(WORKERS):
            self._mount_run_folder(index)
            self.start_worker(index)
        return self

    def stop(self) -> None:
        for index in range(WORKERS):
            self.hosts_link(index, up=True)
        if self.stack is not None:
            self.stack.stop()
            for home in self.homes:
                kill_launchers_of(home)
        for folder in self.mounted:
            subprocess.run(["umount", "-l", str(folder)], capture_output=True)
        if self.redis is not None:
            self.redis.stop()
        if self.postgres is not None:
            self.postgres.remove()
        self.hosts.remove()

    # ---- the parts the injector acts on ----------------------------------------------------------

    def hostname(self, index: int) -> str:
        assert self.stack is not None
        return f"{self.names[index]}-{self.stack.namespace}"

    def start_worker(self, index: int) -> None:
        assert self.stack is not None
        self.stack.start_worker(
            self.names[index], prefix=self.hosts.prefix(index), TRAINJOBS_HOME=str(self.homes[index])
        )

    def worker_alive(self, index: int) -> bool:
        assert self.stack is not None
        process = self.stack.workers.get(self.hostname(index))
        return process is not None and process.poll() is None

    def run_folder(self, index: int) -> Path:
        return self.homes[index] / "runs"

    def hosts_link(self, index: int, up: bool) -> None:
        subprocess.run(
            ["ip", "-n", self.hosts.names[index], "link", "set", "eth0", "up" if up else "down"], capture_output=True
        )

    def api_servers(self) -> list[int]:
        """The API's server processes (its supervisor replaces one that dies)."""
        assert self.stack is not None and self.stack.api is not None
        found = []
        for pid in descendants(self.stack.api.pid):
            try:
                if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes():
                    found.append(pid)
            except OSError:
                continue
        return found

    def running_launchers(self) -> list[int]:
        """Launchers that run a job (not those waiting for one), on every host."""
        found = []
        for home in self.homes:
            for pid in launchers_matching(str(home)):
                try:
                    if Path(f"/proc/{pid}/fd/1").readlink().name == "launcher.log":
                        found.append(pid)
                except OSError:
                    continue
        return sorted(found)

    def api_answers(self) -> bool:
        assert self.stack is not None
        return self.stack._ready()

    def _mount_run_folder(self, index: int) -> None:
        folder = self.run_folder(index)
        folder.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={RUN_FOLDER_BYTES}", "tmpfs", str(folder)],
            check=True,
            capture_output=True,
        )
        self.mounted.append(folder)


def wait_for_api(fleet: ChaosFleet, timeout: float = 60) -> None:
    wait_until(fleet.api_answers, timeout, what="the API to answer")
