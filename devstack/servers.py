"""Servers a stack starts for itself: moto's S3-compatible server, and a private redis-server
that a test may stop and restart."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import httpx
import redis

from devstack.services import free_port, wait_until


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
        self.log = Path(tempfile.mkstemp(prefix="moto-", suffix=".log")[1])
        with open(self.log, "ab") as log:  # the child keeps its own copy of the fd
            self.process = subprocess.Popen(
                [str(binary), "-H", "127.0.0.1", "-p", str(self.port)], stdout=log, stderr=subprocess.STDOUT
            )
        wait_until(self._answers, 20, what="moto's S3 server")
        httpx.put(f"{self.env['AWS_ENDPOINT_URL']}/{self.bucket}").raise_for_status()
        return self

    def restarted_because(self) -> str | None:
        """Starts the server again, on its port with its bucket (empty), if it is no longer running,
        and says how it ended. Once in a CI run of the whole suite it was gone (connection refused)
        when a later test used it, and why was not seen: its output went nowhere then."""
        if self.process is None or self.process.poll() is None:
            return None
        reason = f"moto's S3 server had exited with code {self.process.returncode}: {self.log.read_text()[-2000:]}"
        self.start()
        return reason

    def stop(self) -> None:
        if self.process:
            self.process.terminate()
            self.process.wait(timeout=10)
            self.log.unlink(missing_ok=True)

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


class PrivateRedis:
    """A redis-server of the test's own, on a free port, that the test may stop and restart."""

    def __init__(self, directory: Path, password: str | None = None, host: str = "127.0.0.1", persist: bool = True):
        self.directory = directory
        self.persist = persist  # append-only file on: a restart keeps the data
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
                "yes" if self.persist else "no",
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


class PrivatePostgres:
    """A PostgreSQL server of the run's own (trust auth, run as the `postgres` user that the
    Debian package creates), on a free port, listening on loopback and `host`; the run may crash
    it and start it again. Never the machine's own server. Its folder is a new one under /tmp:
    the `postgres` user cannot enter a test's private tmp_path; `remove` deletes it."""

    def __init__(self, host: str = "127.0.0.1"):
        self.directory = Path(tempfile.mkdtemp(prefix="trainjobs-postgres-"))
        self.data = self.directory / "data"
        self.port = free_port()
        self.host = host
        self.binaries = _postgres_binaries()

    @property
    def url(self) -> str:
        return f"postgresql+psycopg://postgres@{self.host}:{self.port}/trainjobs"

    def start(self) -> PrivatePostgres:
        if not self.data.exists():
            shutil.chown(self.directory, "postgres", "postgres")
            self._as_postgres("initdb", "-D", str(self.data), "-A", "trust", "-U", "postgres", "--no-sync")
            with open(self.data / "pg_hba.conf", "a") as rules:  # the run's hosts, on its bridge
                rules.write(f"host all all {self.host}/24 trust\n")
            self._run_server()
            self._as_postgres("createdb", "-h", "127.0.0.1", "-p", str(self.port), "-U", "postgres", "trainjobs")
            return self
        self._run_server()
        return self

    def crash(self) -> None:
        """Stop at once, as a crash or a failover would: open connections break, unflushed work is
        recovered from the WAL at the next start."""
        self._as_postgres("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")

    def stop(self) -> None:
        if (self.data / "postmaster.pid").exists():
            self._as_postgres("pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "stop")

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.directory, ignore_errors=True)

    def _run_server(self) -> None:
        listen = ",".join(sorted({"127.0.0.1", self.host}))
        options = f"-p {self.port} -k {self.directory} -c listen_addresses={listen} -c fsync=off -c max_connections=300"
        log = str(self.directory / "server.log")
        self._as_postgres("pg_ctl", "-D", str(self.data), "-o", options, "-l", log, "-w", "start")

    def _as_postgres(self, program: str, *args: str) -> None:
        subprocess.run(
            ["runuser", "-u", "postgres", "--", str(self.binaries / program), *args],
            check=True,
            capture_output=True,
            cwd=self.directory,
        )


def _postgres_binaries() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    if not found:
        raise RuntimeError("PostgreSQL's server binaries are not installed (/usr/lib/postgresql/*/bin)")
    return found[-1].parent
