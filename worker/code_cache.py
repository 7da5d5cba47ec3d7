"""A worker's cache of jobs' own code: each archive downloaded once, its sha256 checked, unpacked
safely (every member checked again: nothing that reached the store is trusted), and each distinct
requirements.txt installed once into an environment layered on the worker's own.

    <cache>/archives/<sha256>/            the unpacked archive (read-only files)
    <cache>/environments/<sha256>/        a venv for one requirements.txt (its sha256)
    <cache>/locks/<sha256>.lock           held while one is made; shared while a job uses it

Two jobs that want the same new archive at once (threads of one worker, or workers on one host)
take its lock in turn: the first makes it, the second finds it made. The cache is kept under
`TRAINJOBS_CODE_CACHE_BYTES`: after each addition the least recently used archives and
environments that no job holds go first.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from trainjobs.contract.archives import UnsafeArchive, unpack
from trainjobs.contract.code import REQUIREMENTS, digest_of, stored_path
from trainjobs.store import CheckpointStore
from trainjobs.worker.sandbox import Sandbox, SandboxUsers

log = logging.getLogger(__name__)

PIP_SECONDS = 1800
NO_DATA = Path("/nonexistent")  # pip reads no data set


class CodeFailed(Exception):
    """The job's code cannot run: the archive is not the one named, is unsafe, or its
    requirements do not install. The job fails saying so, and is not retried."""


@dataclass(frozen=True)
class PreparedCode:
    archive: Path  # the unpacked archive: first on the ranks' import path
    packages: Path | None  # the site-packages its requirements.txt installed, if it has one
    installed_now: bool  # its requirements were installed for this job (not found in the cache)


class CodeCache:
    def __init__(
        self,
        root: Path,
        store: CheckpointStore,
        max_bytes: int,
        max_unpacked_bytes: int,
        sandbox_users: SandboxUsers | None = None,
    ):
        """`sandbox_users`: pip runs in a sandbox as one of them (it runs the job's code: a
        setup.py, a build backend). None only where no job's code runs (no sandbox here)."""
        self.root = root
        self.sandbox_users = sandbox_users
        self.store = store
        self.max_bytes = max_bytes
        self.max_unpacked_bytes = max_unpacked_bytes
        for folder in ("archives", "environments", "locks", "downloads"):
            (root / folder).mkdir(parents=True, exist_ok=True)

    @contextmanager
    def prepared(self, code: str, log_file: Path) -> Iterator[PreparedCode]:
        """The job's archive and environment, held (never evicted) while the block runs; pip's
        output, when it installs, is appended to `log_file`."""
        digest = digest_of(code)
        with self._lock(digest, exclusive=True):
            archive = self._archive(code, digest)
        requirements = archive / REQUIREMENTS
        packages, installed_now = None, False
        if requirements.is_file():
            key = _sha256_of(requirements)
            with self._lock(key, exclusive=True):
                packages, installed_now = self._environment(key, archive, log_file)
        with self._lock(digest, exclusive=False), self._lock_if(packages, key if packages else None):
            _touch(archive, packages)
            self._evict()
            yield PreparedCode(archive=archive, packages=packages, installed_now=installed_now)

    # ---- archives -------------------------------------------------------------------------------

    def _archive(self, code: str, digest: str) -> Path:
        archive = self.root / "archives" / digest
        if archive.is_dir():
            return archive
        download = self.root / "downloads" / f"{digest}.tar.gz"
        try:
            self.store.fetch(stored_path(code), download)
        except FileNotFoundError:
            raise CodeFailed(f"code archive {code} is not in the store (deleted?)") from None
        log.info("code archive %s downloaded (%d bytes)", code, download.stat().st_size)
        try:
            if _sha256_of(download) != digest:
                raise CodeFailed(f"code archive {code}: the stored bytes are not the ones named (sha256 differs)")
            unpacking = Path(tempfile.mkdtemp(prefix=f"{digest}.", dir=self.root / "archives"))
            try:
                with open(download, "rb") as file:
                    unpack(file, unpacking, self.max_unpacked_bytes)
            except UnsafeArchive as error:
                shutil.rmtree(unpacking, onerror=_writable_then_retry)
                raise CodeFailed(f"code archive {code} is refused: {error}") from None
            unpacking.chmod(0o555)
            os.rename(unpacking, archive)
            log.info("code archive %s unpacked", code)
        finally:
            download.unlink(missing_ok=True)
        return archive

    # ---- requirements ---------------------------------------------------------------------------

    def _environment(self, key: str, archive: Path, log_file: Path) -> tuple[Path, bool]:
        """A venv for this requirements.txt, layered on the worker's environment (a .pth file
        puts the worker's packages after its own), made once; its site-packages."""
        environment = self.root / "environments" / key
        if environment.is_dir():
            return _site_packages(environment), False
        building = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=self.root / "environments"))
        try:
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(building)], check=True)
            packages = _site_packages(building)
            (packages / "_trainjobs_worker.pth").write_text("\n".join(_worker_site_packages()) + "\n")
            self._install(building, archive, log_file)
            _owned_by(building, 0)  # pip's user wrote it; nobody writes it after
            _readable_by_all(building)  # the ranks' sandbox user reads it (the worker's umask is 027)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        os.rename(building, environment)
        return _site_packages(environment), True

    def _install(self, environment: Path, archive: Path, log_file: Path) -> None:
        """pip install -r requirements.txt, from the archive's root (a `./wheels/x.whl` line works),
        constrained to the worker's own versions: torch and the trainer stay the worker's."""
        constraints = environment / "constraints.txt"
        constraints.write_text(_frozen_worker_packages())
        command = [
            sys.executable, "-m", "pip", "--python", str(environment / "bin" / "python"), "install",
            "--no-input", "--disable-pip-version-check", "--no-warn-script-location",
            "-r", REQUIREMENTS, "-c", str(constraints),
        ]  # fmt: skip
        with open(log_file, "ab") as output, self._pip_user() as uid:
            output.write(b"[trainjobs] installing requirements.txt\n")
            output.flush()
            if uid is not None:
                _owned_by(environment, uid)
                sandbox = Sandbox(environment, uid, NO_DATA, host_network=True, read_only=[str(archive)])
                command = sandbox.command(command, chdir=str(archive))
            done = subprocess.run(
                command, cwd=archive, stdout=output, stderr=subprocess.STDOUT, timeout=PIP_SECONDS, check=False
            )
        if done.returncode != 0:
            raise CodeFailed(f"requirements.txt did not install: {_failed_requirement(log_file, archive)}")

    @contextmanager
    def _pip_user(self) -> Iterator[int | None]:
        """The uid pip runs as, in a sandbox of its own: it writes only the environment being
        made, reads the archive, the system and the worker's Python, and has the host's network
        (it may download) but none of the worker's files or credentials."""
        if self.sandbox_users is None:
            yield None
            return
        uid, lock = self.sandbox_users.claim()
        try:
            yield uid
        finally:
            os.close(lock)

    # ---- holding and eviction -------------------------------------------------------------------

    @contextmanager
    def _lock(self, key: str, exclusive: bool) -> Iterator[None]:
        with open(self.root / "locks" / f"{key}.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    @contextmanager
    def _lock_if(self, path: Path | None, key: str | None) -> Iterator[None]:
        if path is None or key is None:
            yield
            return
        with self._lock(key, exclusive=False):
            yield

    def _evict(self) -> None:
        """Least recently used first, until the cache is within its bound; one a job holds (its
        lock taken) is skipped."""
        entries = [path for folder in ("archives", "environments") for path in (self.root / folder).iterdir()]
        entries = [path for path in entries if path.is_dir() and "." not in path.name]  # not one being made
        sizes = {path: _size_of(path) for path in entries}
        total = sum(sizes.values())
        for path in sorted(entries, key=lambda entry: entry.stat().st_mtime):
            if total <= self.max_bytes:
                return
            with open(self.root / "locks" / f"{path.name}.lock", "a+") as lock:
                try:
                    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    continue  # a job uses it
                shutil.rmtree(path, onerror=_writable_then_retry)
                total -= sizes[path]
                log.info("code cache: %s evicted (least recently used)", path.name)


def _failed_requirement(log_file: Path, archive: Path) -> str:
    """The requirement pip named in its error, else its last lines; a path in the archive as
    the job's owner wrote it (./...), not where this worker keeps it."""
    lines = log_file.read_text(errors="replace").replace(f"{archive}/", "./").splitlines()
    named = [line.strip() for line in lines if "ERROR:" in line]
    return " | ".join(named[-3:]) or " | ".join(line.strip() for line in lines[-3:])


def _frozen_worker_packages() -> str:
    frozen = subprocess.run(
        [sys.executable, "-m", "pip", "list", "--format=freeze", "--exclude-editable"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return "".join(line + "\n" for line in frozen.splitlines() if "==" in line)


def _worker_site_packages() -> list[str]:
    return sorted({sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]})


def _site_packages(environment: Path) -> Path:
    return next((environment / "lib").glob("python3*/site-packages"))


def _sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _owned_by(folder: Path, uid: int) -> None:
    for root, folders, files in os.walk(folder):
        for name in [*folders, *files]:
            os.lchown(os.path.join(root, name), uid, uid)
    os.chown(folder, uid, uid)


def _readable_by_all(folder: Path) -> None:
    for path in [folder, *folder.rglob("*")]:
        if not path.is_symlink():
            extra = 0o555 if path.is_dir() or path.stat().st_mode & 0o100 else 0o444
            path.chmod(path.stat().st_mode | extra)


def _touch(*paths: Path | None) -> None:
    for path in paths:
        if path is not None:
            os.utime(path)


def _size_of(path: Path) -> int:
    return sum(entry.stat().st_size for entry in path.rglob("*") if entry.is_file() and not entry.is_symlink())


def _writable_then_retry(function, path, _error) -> None:
    """Unpacked folders are read-only: make the parent writable and try again."""
    os.chmod(os.path.dirname(path), 0o755)
    if os.path.isdir(path):
        os.chmod(path, 0o755)
    function(path)
