"""The values the sharing rule reads and answers: owners' settings, live workers, running and
queued jobs, and the decision."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from trainjobs.contract.sharing import DEFAULT_MAX_PRIORITY, DEFAULT_WEIGHT

__all__ = ["DEFAULT_MAX_PRIORITY", "DEFAULT_WEIGHT"]  # spelled in the contract


@dataclass(frozen=True)
class OwnerSettings:
    owner: str
    weight: float = DEFAULT_WEIGHT
    max_devices: Mapping[str, int | None] = field(default_factory=dict)  # by device type; None: no cap
    max_priority: int = DEFAULT_MAX_PRIORITY
    allow_non_preemptible: bool = False

    def cap(self, device: str) -> int | None:
        return self.max_devices.get(device)


@dataclass(frozen=True)
class Host:
    """A live worker of the device type: its slots, and how many are free now."""

    hostname: str
    slots: int
    free: int
    sandbox: bool = True


@dataclass(frozen=True)
class RunningJob:
    id: str
    owner: str
    needed: int  # devices on each of its hosts
    hosts: tuple[str, ...]  # node 0's first
    priority: int
    preemptible: bool
    started_at: float  # seconds (the clock of Rules.now)
    preempting_for: str | None = None  # being preempted (checkpointing) for this queued job

    @property
    def devices(self) -> int:
        return self.needed * len(self.hosts)


@dataclass(frozen=True)
class QueuedJob:
    id: str
    owner: str
    needed: int  # devices on each node
    created_at: float
    priority: int = 50
    nodes: int = 1
    own_code: bool = False  # runs only on a worker with a sandbox
    preempted_by: str | None = None  # the job that last took its devices

    @property
    def devices(self) -> int:
        return self.needed * self.nodes


@dataclass(frozen=True)
class Rules:
    now: float
    min_runtime_seconds: float = 600.0
    preemption: bool = True


@dataclass(frozen=True)
class Start:
    job: str
    hosts: tuple[str, ...]  # node 0's first


@dataclass(frozen=True)
class Preemption:
    victim: str
    for_job: str


@dataclass(frozen=True)
class OwnerView:
    owner: str
    weight: float
    share: float
    in_use: int
    max_devices: int | None


@dataclass(frozen=True)
class Decision:
    order: tuple[str, ...]  # every queued job, in the order they will start
    starts: tuple[Start, ...]
    preemptions: tuple[Preemption, ...]
    reasons: Mapping[str, str]  # why each queued job that does not start now waits
    owners: tuple[OwnerView, ...]
