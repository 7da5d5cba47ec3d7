"""A worker's cache of jobs' own code: each archive downloaded once, its sha256 checked, unpacked
safely (every member checked again: nothing that reached the store is trusted), and each distinct
requirements.txt installed once into an environment layered on the worker's own, in two steps
(trainjobs.worker.install_plan): wheels fetched with the network, then the archive's own source
trees built in a sandbox without one.

    <cache>/archives/<sha256>/            the unpacked archive (read-only files)
    <cache>/environments/<key>/           a venv for one requirements.txt and the archive files
                                          it names (install_plan.environment_key)
    <cache>/locks/<sha256>.lock           held while one is made; shared while a job uses it

Two jobs that want the same new archive at once (threads of one worker, or workers on one host)
take its lock in turn: the first makes it, the second finds it made. The cache is kept under
`TRAINJOBS_CODE_CACHE_BYTES`: after each addition the least recently used archives and
environments that no job holds go first.
"""

from __future__ import annotations

import fcntl
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
from trainjobs.contract.code import REQUIREMENTS, digest_of, sha256_of_file, stored_path
from trainjobs.store import CheckpointStore
from trainjobs.worker.bounded_log import last_lines, run_with_bounded_log
from trainjobs.worker.install_plan import InstallPlan, RequirementRefused, environment_key, plan_of
from trainjobs.worker.sandbox import Sandbox, SandboxUsers

log = logging.getLogger(__name__)

PIP_SECONDS = 1800
PIP_LOG_BYTES = 1 << 18  # each pip step's output kept in the job's log: its first and last 128 KiB
PIP_GENERAL = ["--no-input", "--disable-pip-version-check"]
PIP_INSTALL = ["--no-warn-script-location"]
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
            try:
                plan = plan_of(requirements, archive)
            except RequirementRefused as refused:
                raise CodeFailed(str(refused)) from None
            key = environment_key(requirements, archive, plan)
            with self._lock(key, exclusive=True):
                packages, installed_now = self._environment(key, archive, plan, log_file)
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
            if sha256_of_file(download) != digest:
                raise CodeFailed(f"code archive {code}: the stored bytes are not the ones named (sha256 differs)")
            unpacking = Path(tempfile.mkdtemp(prefix=f"{digest}.", dir=self.root / "archives"))
            try:
                with open(download, "rb") as file:
                    unpack(file, unpacking, self.max_unpacked_bytes)
            except BaseException as error:  # a full disk too: nothing half unpacked is left
                shutil.rmtree(unpacking, onerror=_writable_then_retry)
                if isinstance(error, UnsafeArchive):
                    raise CodeFailed(f"code archive {code} is refused: {error}") from None
                raise
            unpacking.chmod(0o555)
            os.rename(unpacking, archive)
            log.info("code archive %s unpacked", code)
        finally:
            download.unlink(missing_ok=True)
        return archive

    # ---- requirements ---------------------------------------------------------------------------

    def _environment(self, key: str, archive: Path, plan: InstallPlan, log_file: Path) -> tuple[Path, bool]:
        """A venv for this plan, layered on the worker's environment (a .pth file puts the
        worker's packages after its own), made once; its site-packages."""
        environment = self.root / "environments" / key
        if environment.is_dir():
            return _site_packages(environment), False
        building = Path(tempfile.mkdtemp(prefix=f"{key}.", dir=self.root / "environments"))
        wheelhouse = self.root / "downloads" / f"{key}.wheels"
        try:
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(building)], check=True)
            packages = _site_packages(building)
            (packages / "_trainjobs_worker.pth").write_text("\n".join(_worker_site_packages()) + "\n")
            (building / "constraints.txt").write_text(_frozen_worker_packages())
            with open(log_file, "ab") as output:
                output.write(b"[trainjobs] installing requirements.txt\n")
            self._fetch_binaries(building, archive, plan, wheelhouse, log_file)
            if plan.sources:
                self._build_sources(building, archive, plan, wheelhouse, log_file)
            _refuse_links(building)
            _owned_by(building, 0)  # pip's user wrote it; nobody writes it after
            _readable_by_all(building)  # the ranks' sandbox user reads it (the worker's umask is 027)
        except BaseException:
            shutil.rmtree(building, ignore_errors=True)
            raise
        finally:
            shutil.rmtree(wheelhouse, ignore_errors=True)
        os.rename(building, environment)
        return _site_packages(environment), True

    def _fetch_binaries(self, environment: Path, archive: Path, plan: InstallPlan, wheelhouse: Path, log: Path) -> None:
        """The step with the host's network: the worker's own pip (its index settings) installs
        wheels only, and downloads the wheels the source trees' backends need. No code of the
        job's runs here: a wheel installs by unpacking, and nothing is built."""
        pip = [sys.executable, "-m", "pip", *PIP_GENERAL]
        if plan.binaries:
            (environment / "binaries.txt").write_text("".join(line + "\n" for line in plan.binaries))
            self._pip([*pip, "--python", str(environment / "bin" / "python"), "install", *PIP_INSTALL,
                       "--only-binary=:all:", "-r", str(environment / "binaries.txt"),
                       "-c", str(environment / "constraints.txt")], archive, log)  # fmt: skip
        if plan.sources:
            shutil.rmtree(wheelhouse, ignore_errors=True)  # one a crashed build left
            wheelhouse.mkdir()
            if plan.build_requires:
                self._pip([*pip, "download", "--only-binary=:all:", "--dest", str(wheelhouse), *plan.build_requires],
                          archive, log)  # fmt: skip
            _readable_by_all(wheelhouse)

    def _build_sources(self, environment: Path, archive: Path, plan: InstallPlan, wheelhouse: Path, log: Path) -> None:
        """The step that runs the job's build code (a setup.py, a backend): in a sandbox of its
        own with no network at all, as an unprivileged user that writes only the environment
        being made; pip finds what it needs in the wheelhouse the first step filled. The trees
        build from a copy (the archive is read-only, and builds write beside their sources)."""
        sources = environment / "sources"
        for path in plan.sources:
            _copy_into(archive / path, sources / path)
        (environment / "sources.txt").write_text("".join(line + "\n" for line in plan.sources))
        command = [
            sys.executable, "-m", "pip", *PIP_GENERAL, "--python", str(environment / "bin" / "python"),
            "install", *PIP_INSTALL, "--no-index", "--find-links", str(wheelhouse),
            "-r", str(environment / "sources.txt"), "-c", str(environment / "constraints.txt"),
        ]  # fmt: skip
        with self._pip_user() as uid:
            if uid is not None:
                _owned_by(environment, uid)
                sandbox = Sandbox(environment, uid, NO_DATA, read_only=[str(wheelhouse)])
                command = sandbox.command(command, chdir=str(sources))
            try:
                self._pip(command, sources, log)
            finally:
                shutil.rmtree(sources, ignore_errors=True)

    def _pip(self, command: list[str], cwd: Path, log_file: Path) -> None:
        """Run one step of pip from `cwd` (paths under it are shown to the owner as ./...)."""
        exit_code = run_with_bounded_log(command, log_file, PIP_LOG_BYTES, PIP_SECONDS, cwd=cwd)
        if exit_code != 0:
            raise CodeFailed(f"requirements.txt did not install: {_failed_requirement(log_file, cwd)}")

    @contextmanager
    def _pip_user(self) -> Iterator[int | None]:
        """The uid the build runs as, in a sandbox of its own: it writes only the environment
        being made, reads the archive, the wheelhouse, the system and the worker's Python, and
        has no network and none of the worker's files or credentials."""
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


def _failed_requirement(log_file: Path, cwd: Path) -> str:
    """The requirement pip named in its error, else the build's own error, else pip's last
    lines; a path under `cwd` as the job's owner wrote it (./...), not where this worker keeps it."""
    lines = [line.strip().replace(f"{cwd}/", "./") for line in last_lines(log_file, PIP_LOG_BYTES // 2)]
    named = [line for line in lines if "ERROR:" in line]
    raised = [line for line in lines if "Error: " in line or line.startswith("error:")]
    return " | ".join(named[-3:] or raised[-2:] or lines[-3:])


def _copy_into(source: Path, target: Path) -> None:
    """A writable copy of an archive's file or folder (a missing one is left for pip to name)."""
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir():
        shutil.copytree(source, target, symlinks=True, dirs_exist_ok=True)
    elif source.is_file():
        shutil.copyfile(source, target)
    for path in [target, *target.rglob("*")] if target.exists() else []:
        path.chmod(path.stat().st_mode | 0o200)


def _refuse_links(environment: Path) -> None:
    """The build ran the job's code as the environment's owner: a link where the launcher copies
    from (site-packages, or a folder above it) would make it copy whatever it points at."""
    lib = environment / "lib"
    for path in [lib, *lib.glob("python3*"), *lib.glob("python3*/site-packages")]:
        if path.is_symlink() or not path.is_dir():
            raise CodeFailed(f"requirements.txt: the build made {path.relative_to(environment)} a link; refused")


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
