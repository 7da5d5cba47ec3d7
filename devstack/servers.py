"""Servers a stack starts for itself: moto's S3-compatible server, and a private redis-server
that a test may stop and restart."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
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
