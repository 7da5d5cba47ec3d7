"""What of a host's NVIDIA driver a job's sandbox holds: the driver's control nodes and the device
nodes of the job's leased GPUs, never another GPU's (a job's code can start a process without
CUDA_VISIBLE_DEVICES, so the other GPUs' nodes must be absent, not merely hidden).

    /dev/nvidiactl, /dev/nvidia-uvm, /dev/nvidia-uvm-tools, /dev/nvidia-modeset   where present
    /dev/nvidia-caps/                       MIG's capability nodes, where present
    /dev/nvidia<id>                         each leased GPU; a missing one fails the job, naming it
    /dev/infiniband/                        on a multi-node job, where the host has RDMA devices
    /proc/driver/nvidia                     the driver's state, its gpus/ folder holding only the
                                            leased GPUs' entries (NVML lists GPUs from there)

A worker's GPU ids are the driver's device minors (`/dev/nvidia<id>`). CUDA numbers the GPUs it
can open in PCI order (CUDA_DEVICE_ORDER=PCI_BUS_ID, the minors' order), so inside the sandbox
the leased GPUs are `cuda:0`..`cuda:k-1`, in ascending id (`sandbox_ids`): local rank i gets the
i-th of them.

`device_root` and `driver_proc` are settings (TRAINJOBS_DEVICE_ROOT, TRAINJOBS_NVIDIA_DRIVER_PROC):
the tests point them at fake nodes made with mknod, on hosts with no GPU."""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

CONTROL_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")
MIG_FOLDER = "nvidia-caps"
RDMA_FOLDER = "infiniband"
DRIVER_PROC_TARGET = "/proc/driver/nvidia"
CUDA_ORDER = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # CUDA's numbering follows the minors


class MissingDevice(RuntimeError):
    """A leased GPU whose device node this host does not have."""


@dataclass(frozen=True)
class GpuNodes:
    device_root: Path = Path("/dev")
    driver_proc: Path = Path(DRIVER_PROC_TARGET)

    def binds(self, gpus: list[int], rdma: bool = False) -> list[str]:
        """bubblewrap's arguments that put the driver and exactly the GPUs `gpus` into a sandbox
        (after its `--dev /dev` and `--proc /proc`); MissingDevice for a leased GPU with no node."""
        if not gpus:
            return []
        nodes = [name for name in CONTROL_NODES if _is_device(self.device_root / name)]
        for gpu in sorted(gpus):
            if not _is_device(self.device_root / f"nvidia{gpu}"):
                raise MissingDevice(f"GPU {gpu} has no device node {self.device_root / f'nvidia{gpu}'} on this host")
            nodes.append(f"nvidia{gpu}")
        binds = [arg for name in nodes for arg in ("--dev-bind", str(self.device_root / name), f"/dev/{name}")]
        folders = [MIG_FOLDER, *([RDMA_FOLDER] if rdma else [])]
        for folder in folders:
            if (self.device_root / folder).is_dir():
                binds += ["--dev-bind", str(self.device_root / folder), f"/dev/{folder}"]
        # Inside, /proc is the sandbox's own: the driver's folder is there only where it is loaded.
        driver_loaded = os.path.isdir(DRIVER_PROC_TARGET)
        return binds + (self.driver_state(gpus) if driver_loaded else [])

    def driver_state(self, gpus: list[int]) -> list[str]:
        """The driver's /proc folder with only the leased GPUs' entries under gpus/."""
        if not self.driver_proc.is_dir():
            return []
        binds = ["--ro-bind", str(self.driver_proc), DRIVER_PROC_TARGET]
        entries = self.gpu_entries()
        if (self.driver_proc / "gpus").is_dir():
            binds += ["--tmpfs", f"{DRIVER_PROC_TARGET}/gpus"]
            for gpu in sorted(gpus):
                if gpu in entries:
                    source = self.driver_proc / "gpus" / entries[gpu]
                    binds += ["--ro-bind", str(source), f"{DRIVER_PROC_TARGET}/gpus/{entries[gpu]}"]
        return binds

    def gpu_entries(self) -> dict[int, str]:
        """Device minor -> the driver's folder of that GPU (its PCI address), from each folder's
        `information` file ("Device Minor: N")."""
        found: dict[int, str] = {}
        folder = self.driver_proc / "gpus"
        for entry in sorted(folder.iterdir()) if folder.is_dir() else []:
            try:
                lines = (entry / "information").read_text().splitlines()
            except OSError:
                continue
            for line in lines:
                name, _, value = line.partition(":")
                if name.strip() == "Device Minor" and value.strip().isdigit():
                    found[int(value)] = entry.name
        return found


def sandbox_ids(gpus: list[int]) -> list[int]:
    """The leased GPUs as the ranks in the sandbox number them (only those are there)."""
    return list(range(len(gpus)))


def _is_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(os.stat(path).st_mode)
    except OSError:
        return False
