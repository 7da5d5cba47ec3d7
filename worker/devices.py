"""The devices a worker owns, and leases of them to jobs. A job runs only on devices it leased,
and two jobs never lease the same device."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass


def core_share(parts: int) -> int:
    """CPU threads for one of `parts` processes sharing this host's cores (at least one): more
    threads than that only thrash."""
    return max(1, (os.cpu_count() or 1) // parts)


@dataclass(frozen=True)
class DeviceLease:
    kind: str  # "cuda" or "cpu"
    ids: tuple[int, ...]  # cuda device ids, or cpu slot numbers
    job_id: str


class DevicePool:
    def __init__(self, kind: str, ids: list[int]):
        if not ids:
            raise ValueError("a worker needs at least one device or cpu slot")
        self.kind = kind
        self.ids = list(ids)
        self._free = list(ids)
        self._leases: dict[str, DeviceLease] = {}
        self._lock = threading.Lock()

    @property
    def size(self) -> int:
        return len(self.ids)

    @property
    def busy(self) -> int:
        with self._lock:
            return len(self.ids) - len(self._free)

    def jobs(self) -> list[str]:
        with self._lock:
            return sorted(self._leases)

    def lease_devices(self, count: int, job_id: str) -> DeviceLease | None:
        """Take `count` free devices for a job, or None when fewer are free now or the job holds
        a lease here already (another message for it is being handled at this moment)."""
        with self._lock:
            if count > len(self._free) or job_id in self._leases:
                return None
            taken, self._free = self._free[:count], self._free[count:]
            lease = DeviceLease(self.kind, tuple(taken), job_id)
            self._leases[job_id] = lease
            return lease

    def release(self, lease: DeviceLease) -> None:
        with self._lock:
            self._leases.pop(lease.job_id, None)
            self._free = sorted(set(self._free) | set(lease.ids))
