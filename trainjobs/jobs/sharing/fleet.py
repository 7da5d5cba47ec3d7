"""One device type's fleet as the rule sees it: capacity, owners' weights, caps, fair shares and
devices in use; and the order queued jobs start in."""

from __future__ import annotations

import heapq
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from operator import attrgetter

from trainjobs.jobs.sharing.values import DEFAULT_WEIGHT, Host, OwnerSettings, OwnerView, QueuedJob, RunningJob


class Fleet:
    """One device type's capacity, owners, shares and devices in use."""

    def __init__(
        self,
        device: str,
        hosts: Sequence[Host],
        running: Sequence[RunningJob],
        queued: Sequence[QueuedJob],
        owners: Mapping[str, OwnerSettings],
    ):
        self.device = device
        self.hosts = sorted(hosts, key=lambda host: host.hostname)
        self.running = list(running)
        self.queued_ids = {job.id for job in queued}
        self.settings = owners
        self.capacity = sum(host.slots for host in hosts)
        self.in_use: dict[str, int] = defaultdict(int)
        for job in running:
            self.in_use[job.owner] += job.devices
        active = {job.owner for job in running} | {job.owner for job in queued}
        total_weight = sum(self.weight(owner) for owner in active)
        self.share = {owner: self.capacity * self.weight(owner) / total_weight for owner in active}

    def weight(self, owner: str) -> float:
        settings = self.settings.get(owner)
        return settings.weight if settings else DEFAULT_WEIGHT

    def cap(self, owner: str) -> int | None:
        settings = self.settings.get(owner)
        return settings.cap(self.device) if settings else None

    def views(self) -> tuple[OwnerView, ...]:
        return tuple(
            OwnerView(owner, self.weight(owner), round(share, 3), self.in_use.get(owner, 0), self.cap(owner))
            for owner, share in sorted(self.share.items())
        )


def start_order(
    queued: Iterable[QueuedJob], in_use: Mapping[str, int], weight: Callable[[str], float]
) -> Iterator[QueuedJob]:
    """The queued jobs in the order they start: priority, then owner's (in use / weight), counting
    the jobs yielded before, then age."""
    by_priority: dict[int, dict[str, list[QueuedJob]]] = defaultdict(lambda: defaultdict(list))
    for job in queued:
        by_priority[job.priority][job.owner].append(job)
    virtual = defaultdict(int, in_use)
    for priority in sorted(by_priority, reverse=True):
        lines = {owner: sorted(jobs, key=AGE, reverse=True) for owner, jobs in by_priority.pop(priority).items()}
        heap = [(virtual[owner] / weight(owner), _age(jobs[-1]), owner) for owner, jobs in lines.items()]
        heapq.heapify(heap)
        while heap:
            _, _, owner = heapq.heappop(heap)
            job = lines[owner].pop()
            yield job
            virtual[owner] += job.devices
            if lines[owner]:
                heapq.heappush(heap, (virtual[owner] / weight(owner), _age(lines[owner][-1]), owner))


AGE = attrgetter("created_at", "id")  # oldest first; the id breaks a tie


def _age(job: QueuedJob) -> tuple[float, str]:
    return AGE(job)
