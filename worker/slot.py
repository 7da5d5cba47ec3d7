"""A launcher's slot: the one folder its sandbox may write in, and what an attempt's ranks are given
there. The sandbox (trainjobs.worker.sandbox) is set up when the launcher starts, before its job is
known, so that its fork server is warm; it sees this folder, at the same path as outside.

    <run dir>/slots/<launcher pid>/                  root's; the sandbox's only writable place
        <job>-a<attempt>/                            the ranks' folder (theirs): logs, result, checkpoints
        code/, packages/                             the job's archive and packages, read-only copies
        channel.sock                                 rank 0's way to the launcher (report_relay)

Once the attempt is over, the ranks' folder moves into the attempt's run folder (`ranks/`), where
its logs stay, and the slot goes with its launcher. What the ranks made is removed through
`rank_files` (no link followed, no recursion however deep they nested folders).
"""

from __future__ import annotations

import logging
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from trainjobs.contract.run import RunRequest
from trainjobs.store import CheckpointStore
from trainjobs.worker.gpu_nodes import GpuNodes, sandbox_ids
from trainjobs.worker.rank_files import RANKS_FOLDER, remove_rank_file, remove_rank_tree
from trainjobs.worker.sandbox import Sandbox, SandboxUsers

log = logging.getLogger("trainjobs.launcher")

SETUP_LOG = "setup.log"  # the worker's preparation of the job's code (pip's output), shipped as rank 0's first lines
RESUME_FILE, INIT_FILE = "resume.pt", "init.pt"  # the checkpoints the ranks start from, fetched here first


@dataclass
class Slot:
    path: Path
    sandbox: Sandbox
    python: Path  # runs this Python inside the sandbox (the fork server is started with it)
    user_lock: int  # the open lock file that holds the sandbox's uid
    gpu_nodes: GpuNodes = GpuNodes()

    @classmethod
    def claim(
        cls,
        slots: Path,
        data_root: Path,
        host_network: bool,
        max_processes: int,
        max_file_bytes: int,
        gpu_nodes: GpuNodes | None = None,
    ) -> Slot:
        uid, user_lock = SandboxUsers(slots / "users").claim()
        path = slots / str(os.getpid())
        remove_rank_tree(path)  # a slot a dead launcher of this pid left (its ranks' folder too)
        path.mkdir(parents=True)
        path.chmod(0o755)  # the launcher's umask (027) would shut the ranks' user out
        sandbox = Sandbox(path, uid, data_root, host_network, max_processes, max_file_bytes)
        python = sandbox.write_python(slots / f"{os.getpid()}.python")
        return cls(path, sandbox, python, user_lock, gpu_nodes or GpuNodes())

    def hold_gpus(self, gpus: list[int]) -> None:
        """From now on the sandbox holds the driver and exactly these GPUs (the job's lease, known
        only once the job arrives: the fork server must be started again after this).
        gpu_nodes.MissingDevice for a GPU whose node this host lacks."""
        self.sandbox.gpu_binds = self.gpu_nodes.binds(gpus, rdma=self.sandbox.host_network)
        self.sandbox.write_python(self.python)

    def release(self) -> None:
        remove_rank_tree(self.path)  # root's: read-only copies of the code go as well
        self.python.unlink(missing_ok=True)
        os.close(self.user_lock)


class AttemptFiles:
    """What one attempt's ranks are given, and what is kept of it after: the ranks' folder (in the
    slot, theirs, or the attempt's run folder where there is no sandbox), read-only copies of the
    job's code, the checkpoint it starts from, and the channel's socket."""

    def __init__(self, request: RunRequest, slot: Slot | None, store: CheckpointStore):
        self.request = request
        self.slot = slot
        self.store = store
        place = slot.path if slot else request.run_path
        self.rank_dir = slot.path / f"{request.job_id}-a{request.attempt}" if slot else request.run_path
        self.channel = place / "channel.sock"
        self.code_dir = self._copied(request.code_dir, place / "code")
        self.packages_dir = self._copied(request.packages_dir, place / "packages")

    @property
    def owner_uid(self) -> int | None:
        return self.slot.sandbox.uid if self.slot else None

    def for_ranks(self) -> RunRequest:
        """The ranks' run request: their folder, code and channel, the checkpoints they start from
        as local files, and no credential (no Redis URL, no store)."""
        self.rank_dir.mkdir(mode=0o700, exist_ok=True)
        if self.owner_uid is not None:
            os.chown(self.rank_dir, self.owner_uid, self.owner_uid)
        self._first_lines()
        return self.request.model_copy(
            update={
                "rank_dir": str(self.rank_dir),
                "channel": str(self.channel),
                "redis_url": None,
                "events_stream": None,
                "checkpoint_dir": "",
                "code_dir": str(self.code_dir) if self.code_dir else None,
                "packages_dir": str(self.packages_dir) if self.packages_dir else None,
                "resume_path": self._fetched(self.request.resume_path, RESUME_FILE),
                "init_path": self._fetched(self.request.init_path, INIT_FILE),
                # In the sandbox only the leased GPUs exist, numbered from 0 (trainjobs.worker.gpu_nodes).
                "devices": sandbox_ids(self.request.devices) if self.slot else self.request.devices,
            }
        )

    def keep(self) -> None:
        """The ranks' files go to the attempt's run folder (`ranks/`); the copies of the code and
        of the checkpoints it started from go (a checkpoint lives in the store alone)."""
        for name in (RESUME_FILE, INIT_FILE):
            remove_rank_file(self.rank_dir, name)
        if self.slot is None:
            return
        kept = self.request.run_path / RANKS_FOLDER
        remove_rank_tree(kept)
        if self.rank_dir.exists():
            os.rename(self.rank_dir, kept)
        for copy in (self.code_dir, self.packages_dir):
            if copy is not None:
                shutil.rmtree(copy, onerror=_writable_then_retry)
        self.channel.unlink(missing_ok=True)

    def _copied(self, source: str | None, target: Path) -> Path | None:
        """The worker's cached copy, linked into the slot read-only (hard links: no bytes copied)."""
        if source is None or self.slot is None:
            return Path(source) if source else None
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(source, target, symlinks=True, copy_function=_link_or_copy)
        return target

    def _fetched(self, relative: str | None, name: str) -> str | None:
        """A checkpoint from the store, fetched into the ranks' folder; its name there."""
        if relative is None:
            return None
        self.store.fetch(relative, self.rank_dir / name)
        if self.owner_uid is not None:  # the ranks' user reads it (the launcher's umask is 027)
            os.chown(self.rank_dir / name, self.owner_uid, self.owner_uid)
        return name

    def _first_lines(self) -> None:
        """The worker's setup output (pip's, for a requirements.txt) opens rank 0's log."""
        setup = self.request.run_path / SETUP_LOG
        if setup.is_file():
            rank_log = self.rank_dir / "rank0.log"
            shutil.copyfile(setup, rank_log)
            if self.owner_uid is not None:
                os.chown(rank_log, self.owner_uid, self.owner_uid)


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:  # another filesystem
        shutil.copy2(source, target)


def _writable_then_retry(function, path, _error) -> None:
    """Copies of the code are read-only: make the parent writable and try again."""
    os.chmod(os.path.dirname(path), 0o755)
    if os.path.isdir(path) and not os.path.islink(path):
        os.chmod(path, 0o755)
    function(path)
