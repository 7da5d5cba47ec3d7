"""Test harness: real services for real tests.

- SQL: a fresh SQLite file, or a fresh PostgreSQL database created on the server at
  $TRAINJOBS_TEST_POSTGRES_URL and dropped afterwards; both migrated with Alembic.
- Redis: the server at $TRAINJOBS_TEST_REDIS_URL, with a namespace per test so keys never mix;
  or a private redis-server process where a test must stop and restart it.
- Stack: the API and a worker as real processes (`trainjobs api`, `trainjobs worker`).
"""

from __future__ import annotations

import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import psycopg
import redis
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session, sessionmaker

from trainjobs.contract.redis_keys import RedisKeys
from trainjobs.jobs.db import make_engine, make_session_factory, transaction
from trainjobs.jobs.job_cache import JobCacheWriter
from trainjobs.service.auth import create_token
from trainjobs.service.migrate import upgrade_to_head

REDIS_URL = os.environ.get("TRAINJOBS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")
POSTGRES_URL = os.environ.get("TRAINJOBS_TEST_POSTGRES_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def wait_until(predicate, timeout: float, interval: float = 0.2, what: str = "condition"):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)


@contextmanager
def sql_database(kind: str, tmp_path: Path):
    """Yield the URL of a new, migrated database of `kind` ("sqlite" or "postgresql")."""
    if kind == "sqlite":
        url = f"sqlite:///{tmp_path / 'trainjobs.db'}"
        upgrade_to_head(url)
        yield url
        return
    server = make_url(POSTGRES_URL)
    name = f"trainjobs_test_{secrets.token_hex(6)}"
    admin_dsn = server.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(admin_dsn, autocommit=True) as connection:
        connection.execute(f'CREATE DATABASE "{name}"')
    url = server.set(database=name).render_as_string(hide_password=False)
    try:
        upgrade_to_head(url)
        yield url
    finally:
        with psycopg.connect(admin_dsn, autocommit=True) as connection:
            connection.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def new_token(database_url: str, owner: str, admin: bool = False) -> str:
    engine = make_engine(database_url)
    try:
        with transaction(make_session_factory(engine, job_cache=None)) as session:
            return create_token(session, owner, admin)
    finally:
        engine.dispose()


def job_sessions(database_url: str, namespace: str, redis_url: str = REDIS_URL) -> sessionmaker[Session]:
    """Sessions as a worker's, the collector's or the reaper's are made: the job changes they
    commit reach the job cache and the workers' notices in `namespace`."""
    client = redis.Redis.from_url(redis_url, socket_timeout=10, socket_connect_timeout=5)
    return make_session_factory(make_engine(database_url), JobCacheWriter(client, RedisKeys(namespace)))


def clear_namespace(redis_url: str, namespace: str) -> None:
    # Bounded: a teardown never waits on a Redis that is gone for longer than this.
    client = redis.Redis.from_url(redis_url, socket_connect_timeout=5, socket_timeout=5)
    try:
        keys = list(client.scan_iter(f"{namespace}*"))
        if keys:
            client.delete(*keys)
    except redis.ConnectionError:
        pass  # a test's private Redis, already stopped
    finally:
        client.close()


class MotoS3:
    """moto's standalone server: a real S3-compatible HTTP server on a free port, with one bucket.
    `env` holds the AWS variables that point s3fs (botocore) at it."""

    def __init__(self, bucket: str = "trainjobs-test"):
        self.port = free_port()
        self.bucket = bucket
        self.process: subprocess.Popen | None = None
        self.env = {
            "AWS_ACCESS_KEY_ID": "testing",
            "AWS_SECRET_ACCESS_KEY": "testing",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ENDPOINT_URL": f"http://127.0.0.1:{self.port}",
        }

    def start(self) -> MotoS3:
        binary = Path(sys.executable).parent / "moto_server"
        self.process = subprocess.Popen(
            [str(binary), "-H", "127.0.0.1", "-p", str(self.port)],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self._answers, 20, what="moto's S3 server")
        httpx.put(f"{self.env['AWS_ENDPOINT_URL']}/{self.bucket}").raise_for_status()
        return self

    def stop(self) -> None:
        if self.process:
            self.process.terminate()
            self.process.wait(timeout=10)

    def objects(self, prefix: str) -> dict[str, int]:
        """Key -> size of every object under `prefix`, read over the S3 API."""
        answer = httpx.get(f"{self.env['AWS_ENDPOINT_URL']}/{self.bucket}", params={"list-type": "2", "prefix": prefix})
        keys = re.findall(r"<Key>([^<]+)</Key>\s*(?:<[^>]+>[^<]*</[^>]+>\s*)*?<Size>(\d+)</Size>", answer.text)
        return {key: int(size) for key, size in keys}

    def _answers(self) -> bool:
        try:
            return httpx.get(self.env["AWS_ENDPOINT_URL"], timeout=0.5).status_code < 500
        except httpx.HTTPError:
            return False


class NetworkHosts:
    """Hosts of their own on one machine: network namespaces joined by veth pairs to a bridge in
    this namespace, on a private /24 chosen here. Traffic stays between them and this namespace.
    Needs root (`ip netns`); removed again by `remove`."""

    def __init__(self, count: int):
        self.tag = secrets.token_hex(2)
        self.subnet = f"10.{random.randint(64, 127)}.{random.randint(1, 254)}"
        self.bridge = f"tjbr{self.tag}"
        self.names = [f"tjns{self.tag}{index}" for index in range(count)]
        self.gateway = f"{self.subnet}.1"
        self.addresses = [f"{self.subnet}.{index + 2}" for index in range(count)]

    def create(self) -> NetworkHosts:
        self._ip("link", "add", self.bridge, "type", "bridge")
        self._ip("addr", "add", f"{self.gateway}/24", "dev", self.bridge)
        self._ip("link", "set", self.bridge, "up")
        for index, (name, address) in enumerate(zip(self.names, self.addresses, strict=True)):
            outside = f"tjv{self.tag}{index}"
            self._ip("netns", "add", name)
            self._ip("link", "add", outside, "type", "veth", "peer", "name", "eth0", "netns", name)
            self._ip("link", "set", outside, "master", self.bridge)
            self._ip("link", "set", outside, "up")
            self._ip("-n", name, "addr", "add", f"{address}/24", "dev", "eth0")
            self._ip("-n", name, "link", "set", "eth0", "up")
            self._ip("-n", name, "link", "set", "lo", "up")
        return self

    def prefix(self, index: int) -> list[str]:
        return ["ip", "netns", "exec", self.names[index]]

    def remove(self) -> None:
        for name in self.names:
            subprocess.run(["ip", "netns", "delete", name], capture_output=True)
        subprocess.run(["ip", "link", "delete", self.bridge], capture_output=True)

    @staticmethod
    def _ip(*args: str) -> None:
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


class PrivateRedis:
    """A redis-server of the test's own, on a free port, that the test may stop and restart."""

    def __init__(self, directory: Path, password: str | None = None, host: str = "127.0.0.1"):
        self.directory = directory
        self.port = free_port()
        self.password = password  # AUTH required when set (requirepass)
        self.host = host  # bound beside 127.0.0.1 (a bridge's address, for hosts in network namespaces)
        self.process: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        credentials = f":{self.password}@" if self.password else ""
        return f"redis://{credentials}{self.host}:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError("redis-server is not installed (the README's setup installs it)")
        self.process = subprocess.Popen(
            [
                binary,
                "--port",
                str(self.port),
                "--bind",
                *sorted({"127.0.0.1", self.host}),
                "--save",
                "",
                "--appendonly",
                "yes",
                "--dir",
                str(self.directory),
                *(["--requirepass", self.password] if self.password else []),
                # Clients on the bridge come from non-loopback addresses: the test's own hosts.
                *(["--protected-mode", "no"] if self.host != "127.0.0.1" else []),
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        wait_until(self._answers, 10, what="private redis-server")

    def stop(self) -> None:
        if self.process:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.process = None

    def _answers(self) -> bool:
        try:
            return redis.Redis(port=self.port, password=self.password, socket_connect_timeout=0.5).ping()
        except redis.ConnectionError:
            return False


class Stack:
    """The API and one worker as real processes, sharing one SQL database, Redis and home."""

    def __init__(self, home: Path, database_url: str, redis_url: str, cpu_slots: int = 2, **extra_env: str):
        self.home = home
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.namespace = f"tjtest-{secrets.token_hex(4)}"
        self.env = dict(
            os.environ,
            TRAINJOBS_HOME=str(home),
            TRAINJOBS_DATABASE_URL=database_url,
            TRAINJOBS_REDIS_URL=redis_url,
            TRAINJOBS_NAMESPACE=self.namespace,
            TRAINJOBS_OUTBOX_GRACE_SECONDS="1",
            TRAINJOBS_SWEEP_INTERVAL_SECONDS="0.5",
            # One API process unless a test asks for more (tests/e2e/test_api_processes.py): a
            # test that kills "the API" kills the process that answers.
            TRAINJOBS_API_WORKERS="1",
            PYTHONUNBUFFERED="1",
        )
        self.env.update(extra_env)
        self.database_url = database_url
        self.redis_url = redis_url
        self.cpu_slots = cpu_slots
        self.api: subprocess.Popen | None = None
        self.workers: dict[str, subprocess.Popen] = {}
        self.logs = home / "logs"
        self.logs.mkdir(parents=True, exist_ok=True)

    def start(self) -> Stack:
        self.start_api()
        self.start_worker()
        return self

    def start_api_only(self) -> Stack:
        self.start_api()
        return self

    def start_api(self) -> None:
        self.api = self._spawn("api", ["api", "--port", str(self.port)])
        wait_until(self._ready, 30, what="the API's /readyz")

    def start_worker(
        self, name: str = "worker", slots: int | None = None, prefix: list[str] | None = None, **env: str
    ) -> subprocess.Popen:
        """`env`: this worker's own settings (another TRAINJOBS_HOME: a host that shares no disk).
        `prefix`: what runs the worker (`ip netns exec NS`: a host of its own on the network)."""
        hostname = f"{name}-{self.namespace}"
        args = ["worker", "--cpu-slots", str(slots or self.cpu_slots), "--hostname", hostname]
        process = self._spawn(name, args, env, prefix)
        self.workers[hostname] = process
        return process

    def kill_worker(self, hostname: str) -> None:
        """SIGKILL the worker process, as a lost host would be; its launcher and ranks are the
        test's to kill too (they live in their own session)."""
        process = self.workers[hostname]
        process.kill()
        process.wait(timeout=10)

    def kill_api(self) -> None:
        """SIGKILL, as a crash would: no shutdown handlers run."""
        self.api.kill()
        self.api.wait(timeout=10)

    def stop(self) -> None:
        processes = [self.api, *self.workers.values()]
        for process in processes:
            if process and process.poll() is None:
                # SIGQUIT: Celery's cold shutdown, so a worker does not wait for its jobs to end.
                os.killpg(process.pid, signal.SIGQUIT if process is not self.api else signal.SIGTERM)
        for process in processes:
            if process:
                try:
                    process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait()
        kill_launchers_of(self.home)
        clear_namespace(self.redis_url, self.namespace)

    def client(self, token: str) -> httpx.Client:
        return httpx.Client(base_url=self.url, headers={"Authorization": f"Bearer {token}"}, timeout=30)

    def token(self, owner: str = "alice", admin: bool = False) -> str:
        return new_token(self.database_url, owner, admin)

    def log_text(self, name: str) -> str:
        return (self.logs / f"{name}.log").read_text()

    def _spawn(
        self, name: str, args: list[str], env: dict[str, str] | None = None, prefix: list[str] | None = None
    ) -> subprocess.Popen:
        with open(self.logs / f"{name}.log", "ab") as log:  # the child keeps its own copy of the fd
            return subprocess.Popen(
                [*(prefix or []), sys.executable, "-m", "trainjobs.cli", *args],
                env={**self.env, **(env or {})},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def _ready(self) -> bool:
        if self.api.poll() is not None:
            raise RuntimeError(f"the API exited:\n{self.log_text('api')[-3000:]}")
        try:
            return httpx.get(f"{self.url}/readyz", timeout=2).status_code == 200
        except httpx.HTTPError:
            return False


def launchers_matching(text: str) -> list[int]:
    """PIDs of launcher processes whose output file's path mentions `text` (a job id, a stack's
    home): a job's launcher writes to that attempt's launcher.log, a launcher still waiting for
    its job to its worker's launchers.log."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            output = os.readlink(entry / "fd" / "1")
        except OSError:
            continue
        if b"trainjobs.worker.launcher" in cmdline and text in output:
            found.append(int(entry.name))
    return found


def waiting_launchers(home: Path) -> list[int]:
    """Launchers a worker under `home` started ahead of their job, still waiting for it."""
    return [pid for pid in launchers_matching(str(home)) if os.readlink(f"/proc/{pid}/fd/1").endswith("launchers.log")]


def descendants(pid: int) -> list[int]:
    """Every process below `pid`: a launcher's fork server, and the ranks forked from it."""
    found, frontier = [], [pid]
    while frontier:
        try:
            children = child_pids(frontier.pop())
        except OSError:
            continue
        found += children
        frontier += children
    return found


def kill_launchers_of(home: Path) -> None:
    for pid in launchers_matching(str(home)):
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


def processes_of_job(job_id: str) -> list[int]:
    """Every live launcher, fork server and rank of a job on this machine, whichever worker
    started them: a launcher writes to the job's launcher.log, a rank's stdout is the job's rank
    log, the fork server is its launcher's child."""
    found = set(launchers_matching(job_id))
    for launcher in list(found):
        found.update(descendants(launcher))
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if f"/{job_id}/" in os.readlink(entry / "fd" / "1"):
                    found.add(int(entry.name))
            except OSError:
                continue
    return sorted(pid for pid in found if pid_alive(pid))


def find_launcher(job_id: str) -> int | None:
    found = launchers_matching(job_id)
    return found[0] if found else None


def child_pids(pid: int) -> list[int]:
    children = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        children += [int(child) for child in (task / "children").read_text().split()]
    return children


def rank_pids(job_id: str, timeout: float = 15) -> dict[int, int]:
    """{rank: pid} of a running job, told by the log file each rank's stdout points at."""

    def ranks():
        launcher = find_launcher(job_id)
        found = {}
        for pid in descendants(launcher) if launcher else []:
            try:
                target = os.readlink(f"/proc/{pid}/fd/1")
            except OSError:
                continue
            if "/rank" in target and target.endswith(".log"):
                found[int(target.rsplit("/rank", 1)[1].removesuffix(".log"))] = pid
        return found

    return wait_until(ranks, timeout, what=f"the ranks of job {job_id}")


def pid_alive(pid: int) -> bool:
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in status


def wait_for_terminal(client: httpx.Client, job_id: str, timeout: float = 180) -> dict:
    def terminal():
        job = client.get(f"/v1/jobs/{job_id}").json()
        return job if job["state"] in ("succeeded", "failed", "cancelled") else None

    return wait_until(terminal, timeout, interval=0.5, what=f"job {job_id} to end")


# Data for the tiny wavenet that makes an epoch last about half a second on 2 cpu ranks here (the
# default data: about 0.05 s), for tests that must act while a job is between epochs.
HALF_SECOND_EPOCHS = {"name": "synthetic-audio", "params": {"num_samples": 1024, "length": 256, "mu": 32}}


def tiny_wavenet_spec(**overrides) -> dict:
    spec = {
        "name": "tiny-wavenet",
        "model": {"name": "wavenet", "params": {"n_residue": 8, "n_skip": 16, "dilation_depth": 4, "n_repeat": 1}},
        "data": {"name": "synthetic-audio", "params": {"num_samples": 64, "length": 128, "mu": 32}},
        "device": "cpu",
        "gpus": 2,
        "epochs": 3,
        "batch_size": 8,
        "optimizer": {"name": "adamw", "lr": 0.01},
        "lr_scaling": "none",
    }
    spec.update(overrides)
    return spec


def plugin_spec(**overrides) -> dict:
    """A job on the test plugin's model and dataset (tests/plugin_package; fixture plugin_installed)."""
    return {
        "model": {"name": "logistic"},
        "data": {"name": "blobs"},
        "device": "cpu",
        "gpus": 2,
        "epochs": 3,
        "batch_size": 16,
        "optimizer": {"name": "sgd", "lr": 0.1},
        **overrides,
    }
