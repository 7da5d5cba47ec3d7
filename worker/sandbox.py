"""The sandbox a job's ranks run in: bubblewrap (Debian's `bubblewrap` package) for the
namespaces and the mounts, util-linux's `setpriv` for the user, `prlimit` for the limits.

What the ranks get, and why:
- **a user of their own**: a uid of its own for each launcher (`SandboxUsers`), never the
  worker's, with no supplementary groups, no capabilities and no_new_privs. Their processes count
  against their own RLIMIT_NPROC (a fork bomb stops at `max_processes`, in that job alone);
- **their own process namespace**: they see no process of the worker or of another job, and so
  cannot signal one;
- **an environment built from nothing** (`--clearenv`, then the few variables below);
- **their own mounts**: read-only, the system's libraries and the Python environment (the
  interpreter, its packages, the trainer) at the paths they have outside, and the data root;
  read-write, only their slot (the attempt's rank folder, and the job's code and packages,
  copied in read-only by the launcher) and a private /tmp. No home, no run folders of other
  jobs, no checkpoint spool, no SQL file, no token, no store credential;
- **no network but loopback** on a one-node job (a network namespace of their own); a multi-node
  job keeps the host's network, which DDP needs to reach its other nodes (and still holds no
  credential);
- **a bound on the files they write** (RLIMIT_FSIZE), and the launcher watches the rank folder's
  size (`TRAINJOBS_JOB_DISK_BYTES`);
- **exactly the job's GPUs** on a GPU host: the driver's control nodes and the leased GPUs' device
  nodes, no other GPU's (trainjobs.worker.gpu_nodes), given when the job arrives (`gpu_binds`).

The launcher runs bubblewrap as root (it needs to hand the ranks another uid); a worker that is
not root, or lacks the tools, has no sandbox (`unavailable_because`).
"""

from __future__ import annotations

import fcntl
import os
import shlex
import shutil
import sys
import sysconfig
from dataclasses import dataclass, field
from pathlib import Path

from trainjobs.worker.gpu_nodes import CUDA_ORDER

TOOLS = ("bwrap", "setpriv", "prlimit")
UID_BASE, UID_COUNT = 200_000, 4096  # the sandboxes' uids: none is a user of the host
SYSTEM_PATHS = ("/usr", "/lib", "/lib64", "/lib32", "/bin", "/sbin")
# Of /etc, what programs read to run and name hosts, and public certificates; nothing more (no
# passwd or shadow, no private keys, no configuration of the host's services).
SYSTEM_FILES = (
    "/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/hosts", "/etc/nsswitch.conf", "/etc/resolv.conf",
    "/etc/os-release", "/etc/debian_version", "/etc/ssl/certs", "/etc/ca-certificates",
)  # fmt: skip
ENVIRONMENT = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "HOME": "/tmp",
    "TMPDIR": "/tmp",
    "USER": "trainjobs",
    "LANG": "C.UTF-8",
    "PYTHONUNBUFFERED": "1",
    "PYTHONDONTWRITEBYTECODE": "1",
    "PYTHONSAFEPATH": "1",  # no working directory on the import path (the ranks start in their slot)
}


def unavailable_because() -> str | None:
    """Why this host cannot sandbox jobs (None: it can)."""
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (Debian: apt-get install bubblewrap util-linux)"
    if os.geteuid() != 0:
        return "the worker does not run as root, so it cannot give a job's ranks a user of their own"
    return None


class SandboxUsers:
    """The uids sandboxes run as: one per launcher, held by a lock file for as long as it lives."""

    def __init__(self, directory: Path):
        self.directory = directory

    def claim(self) -> tuple[int, int]:
        """A uid no live launcher holds, and the open lock file that holds it (close it to let go)."""
        self.directory.mkdir(parents=True, exist_ok=True)
        for uid in range(UID_BASE, UID_BASE + UID_COUNT):
            descriptor = os.open(self.directory / f"{uid}.lock", os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(descriptor, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return uid, descriptor
            except BlockingIOError:
                os.close(descriptor)
        raise RuntimeError(f"every sandbox uid from {UID_BASE} is taken")


@dataclass
class Sandbox:
    slot: Path  # read-write inside, at the same path: the attempt's rank folder, code, packages
    uid: int
    data_root: Path  # read-only inside
    host_network: bool = False  # a multi-node job's ranks reach their peers
    max_processes: int = 512  # tasks (threads count) of the ranks together
    max_file_bytes: int = 2**34
    gpu_binds: list[str] = field(default_factory=list)  # the job's GPUs (gpu_nodes.GpuNodes.binds)
    read_only: list[str] = field(default_factory=list)  # more folders it reads (pip: the job's archive)

    def command(self, program: list[str], chdir: str | None = None) -> list[str]:
        """`program` (an absolute path first), run inside [in the slot, or `chdir`]."""
        limits = ["prlimit", f"--nproc={self.max_processes}", f"--fsize={self.max_file_bytes}", "--"]
        user = ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups", "--no-new-privs", "--"]
        mounts = [*self._mounts(), "--chdir", chdir or str(self.slot)]
        return [*limits, "bwrap", *self._namespaces(), *mounts, *self._environment(), "--", *user, *program]

    def write_python(self, path: Path) -> Path:
        """An executable at `path` that runs this Python inside the sandbox with the arguments it
        is given (multiprocessing's fork server is started with it)."""
        command = shlex.join(self.command([sys.executable]))
        path.write_text(f'#!/bin/sh\nexec {command} "$@"\n')
        path.chmod(0o700)
        return path

    def _namespaces(self) -> list[str]:
        flags = ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
        if not self.host_network:
            flags.append("--unshare-net")
        return [*flags, "--die-with-parent", "--new-session", "--hostname", "sandbox"]

    def _mounts(self) -> list[str]:
        mounts: list[str] = []
        for path in SYSTEM_PATHS:
            if os.path.islink(path):  # /lib -> usr/lib on a merged /usr
                mounts += ["--symlink", os.readlink(path), path]
            elif os.path.isdir(path):
                mounts += ["--ro-bind", path, path]
        mounts += ["--perms", "0755", "--dir", "/etc", "--perms", "0755", "--dir", "/etc/ssl"]
        for path in SYSTEM_FILES:
            mounts += ["--ro-bind-try", path, path]
        # The private /tmp and /dev/shm live in memory: each is bounded like the ranks' folder.
        size = ["--size", str(self.max_file_bytes), "--perms", "1777"]
        mounts += ["--proc", "/proc", "--dev", "/dev", *size, "--tmpfs", "/tmp", *size, "--tmpfs", "/dev/shm"]
        read_only = [path for path in python_paths() if not _under(path, SYSTEM_PATHS)]
        read_only += [path for path in self.read_only if not _under(path, read_only)]
        if self.data_root.is_dir():
            read_only.append(str(self.data_root))
        mounts += _parent_folders([*read_only, str(self.slot)])
        for path in read_only:
            mounts += ["--ro-bind", path, path]
        mounts += ["--bind", str(self.slot), str(self.slot)]
        if self.gpu_binds:  # CUDA and NVML read the PCI devices' state in /sys
            mounts += ["--ro-bind-try", "/sys", "/sys", *self.gpu_binds]
        return mounts

    def _environment(self) -> list[str]:
        variables = dict(ENVIRONMENT) | (CUDA_ORDER if self.gpu_binds else {})
        for name in ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_"):  # the ranks' heap (launcher.warm_up)
            if name in os.environ:
                variables[name] = os.environ[name]
        pairs = [part for name, value in variables.items() for part in ("--setenv", name, value)]
        return ["--clearenv", *pairs]


def python_paths() -> list[str]:
    """What this Python needs to run the trainer: its installation, its environment's packages,
    and the folders of the trainjobs packages where they live outside site-packages (an
    editable install)."""
    import trainjobs
    import trainjobs.worker

    wanted = {sys.base_prefix, sys.prefix, *(sysconfig.get_paths()[key] for key in ("stdlib", "purelib", "platlib"))}
    wanted |= {str(Path(path).resolve()) for package in (trainjobs, trainjobs.worker) for path in package.__path__}
    wanted.add(str(Path(sys.executable).resolve().parent.parent))
    kept: list[str] = []
    for path in sorted(wanted, key=len):  # a folder inside one kept already is bound with it
        if os.path.isdir(path) and not _under(path, kept):
            kept.append(path)
    return kept


MOUNT_POINTS = ("/tmp", "/dev", "/proc", "/dev/shm")


def _under(path: str, roots: tuple[str, ...] | list[str]) -> bool:
    return any(path == root or path.startswith(root.rstrip("/") + "/") for root in roots)


def _parent_folders(paths: list[str]) -> list[str]:
    """The folders above the bound paths, made in the sandbox's root as readable by the ranks'
    user (bubblewrap would make them 0700); none inside a mount of its own (/tmp keeps 1777)."""
    parents = {str(parent) for path in paths for parent in Path(path).parents if str(parent) != "/"}
    made = sorted(
        (parent for parent in parents if parent not in MOUNT_POINTS and not _under(parent, SYSTEM_PATHS)),
        key=lambda parent: parent.count("/"),
    )
    return [argument for parent in made for argument in ("--perms", "0755", "--dir", parent)]
