"""The stack: the API and workers as real processes (`trainjobs api`, `trainjobs worker`),
sharing one SQL database, Redis and home."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
from pathlib import Path

import httpx

from devstack.processes import kill_launchers_of
from devstack.services import clear_namespace, free_port, new_token, wait_until


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
        self,
        name: str = "worker",
        slots: int | None = None,
        prefix: list[str] | None = None,
        cwd: Path | None = None,
        gpus: str | None = None,
        **env: str,
    ) -> subprocess.Popen:
        """`env`: this worker's own settings (another TRAINJOBS_HOME: a host that shares no disk).
        `prefix`: what runs the worker (`ip netns exec NS`: a host of its own on the network).
        `cwd`: its working directory. `gpus`: the cuda devices it owns ("0,1"), instead of cpu slots."""
        hostname = f"{name}-{self.namespace}"
        devices = ["--gpus", gpus] if gpus else ["--cpu-slots", str(slots or self.cpu_slots)]
        args = ["worker", *devices, "--hostname", hostname]
        process = self._spawn(name, args, env, prefix, cwd)
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
        self,
        name: str,
        args: list[str],
        env: dict[str, str] | None = None,
        prefix: list[str] | None = None,
        cwd: Path | None = None,
    ) -> subprocess.Popen:
        """`python -P -m trainjobs.cli ARGS`: as the installed `trainjobs` command runs, with nothing
        of its working directory (`cwd`) on the import path."""
        with open(self.logs / f"{name}.log", "ab") as log:  # the child keeps its own copy of the fd
            return subprocess.Popen(
                [*(prefix or []), sys.executable, "-P", "-m", "trainjobs.cli", *args],
                env={**self.env, **(env or {})},
                cwd=cwd,
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


def wait_for_terminal(client: httpx.Client, job_id: str, timeout: float = 180) -> dict:
    def terminal():
        job = client.get(f"/v1/jobs/{job_id}").json()
        return job if job["state"] in ("succeeded", "failed", "cancelled") else None

    return wait_until(terminal, timeout, interval=0.5, what=f"job {job_id} to end")
