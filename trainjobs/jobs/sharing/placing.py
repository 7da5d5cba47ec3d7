"""One pass over the start order: what starts where, which running jobs are preempted for whom,
and why each job left waits (the rules are in trainjobs.jobs.sharing's docstring).

Speed: a long queue is mostly jobs that wait. What a waiting job costs is kept small by
remembering, until something changes (`version`: a start, a preemption, a reservation that took
devices), the largest free hole, the victims allowed in their order, and the shapes of job
(priority, size, owner) that found no victims: each such job is then answered in constant time."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property

from trainjobs.jobs.scheduling import never_fits
from trainjobs.jobs.sharing.fleet import Fleet
from trainjobs.jobs.sharing.values import Preemption, QueuedJob, Rules, RunningJob, Start


class Placing:
    def __init__(self, fleet: Fleet, rules: Rules):
        self.fleet = fleet
        self.rules = rules
        self.free = {host.hostname: host.free for host in fleet.hosts}
        self.in_use = dict(fleet.in_use)  # what each owner holds or is given in this decision (never falls)
        self.holding = dict(fleet.in_use)  # what each owner's running jobs hold, less the victims chosen
        self.starts: list[Start] = []
        self.preemptions: list[Preemption] = []
        self.reasons: dict[str, str] = {}
        self.taken: set[str] = set()  # running jobs chosen as victims in this decision
        self.pending = {job.preempting_for for job in fleet.running if job.preempting_for}
        self.started: set[str] = set()  # jobs started in this decision
        self.adopted: set[str] = set()  # stopping victims handed on to another job in this decision
        self.waiting_behind: int | None = None  # the highest priority among jobs that wait
        self.version = 0  # bumped by every change to free devices, holdings or victims
        self.victims_version = 0  # bumped by a change of holdings or victims
        self._cache_version = -1
        self._order_version = -1
        self._largest_free = 0
        self._victim_order: list[RunningJob] = []
        self._no_victims: set[tuple] = set()
        self._never: dict[tuple, str | None] = {}

    def place(self, job: QueuedJob) -> None:
        reason = self._never_here(job) or self._capped(job)
        if reason is None:
            hosts = self._fitting(job, self.free) if self._largest() >= job.needed else None
            if hosts is not None:
                self._start(job, hosts)
                return
            reason = self._waits(job)
        if job.preempted_by:
            reason = f"preempted by job {job.preempted_by}; {reason}"
        self.reasons[job.id] = reason

    # ---- the rules that hold a job ---------------------------------------------------------------

    def _never_here(self, job: QueuedJob) -> str | None:
        """No live worker of the type could ever hold it."""
        shape = (job.needed, job.nodes, job.own_code)
        if shape not in self._never:
            self._never[shape] = self._never_here_for(*shape)
        return self._never[shape]

    def _never_here_for(self, needed: int, nodes: int, own_code: bool) -> str | None:
        capacities = [(host.slots, host.sandbox) for host in self.fleet.hosts]
        return never_fits(self.fleet.device, needed, capacities, nodes, own_code)

    def _capped(self, job: QueuedJob) -> str | None:
        cap = self.fleet.cap(job.owner)
        used = self.in_use.get(job.owner, 0)
        if cap is not None and used + job.devices > cap:
            return (
                f"owner {job.owner} is at its cap: {used} of max_devices {cap} {self.fleet.device} devices in use, "
                f"this job needs {job.devices}"
            )
        return None

    def _waits(self, job: QueuedJob) -> str:
        """It does not fit now: it waits for victims it has already, preempts some, or reserves."""
        if job.id in self.pending:
            victims = [victim for victim in self.fleet.running if victim.preempting_for == job.id]
            self._reserve(job, victims)
            self._hand_over(job, victims)
            names = ", ".join(sorted(victim.id for victim in victims))
            return f"waiting for job {names} to checkpoint and stop (preempted for it)"
        orphans = self._orphans(job)
        if orphans:
            self.adopted.update(victim.id for victim in orphans)
            self._reserve(job, orphans)
            self._hand_over(job, orphans)
            names = ", ".join(sorted(victim.id for victim in orphans))
            return f"waiting for job {names} to checkpoint and stop (preempted for a job that started elsewhere)"
        chosen = self._victims(job) if self.rules.preemption else None
        if chosen:
            self.taken.update(victim.id for victim in chosen)
            self.preemptions += [Preemption(victim.id, job.id) for victim in chosen]
            self._reserve(job, chosen)
            self._hand_over(job, chosen)
            return f"preempting job {', '.join(victim.id for victim in chosen)} for it"
        reason = self._why_no_victims(job)
        self._reserve(job)
        return reason

    def _why_no_victims(self, job: QueuedJob) -> str:
        kind, share = self.fleet.device, self.fleet.share[job.owner]
        if self.waiting_behind is not None and self.waiting_behind > job.priority:
            return f"waiting behind jobs of higher priority for {job.devices} free {kind} devices"
        used = self.in_use.get(job.owner, 0)
        if used + job.devices > share:
            return (
                f"waiting for {job.devices} free {kind} devices: owner {job.owner} would be above its fair share "
                f"({used} in use + {job.devices} > {share:.1f}), so it preempts no one"
            )
        return f"waiting for {job.devices} free {kind} devices (no running job may be preempted for it yet)"

    # ---- placing ---------------------------------------------------------------------------------

    def _fitting(self, job: QueuedJob, free: Mapping[str, int]) -> tuple[str, ...] | None:
        """The `nodes` hosts with the fewest free devices that hold it (then by name), or None."""
        fits = [
            (free[host.hostname], host.hostname)
            for host in self.fleet.hosts
            if free[host.hostname] >= job.needed and (host.sandbox or not job.own_code)
        ]
        if len(fits) < job.nodes:
            return None
        return tuple(hostname for _, hostname in sorted(fits)[: job.nodes])

    def _start(self, job: QueuedJob, hosts: tuple[str, ...]) -> None:
        for hostname in hosts:
            self.free[hostname] -= job.needed
        self.in_use[job.owner] = self.in_use.get(job.owner, 0) + job.devices
        self.starts.append(Start(job.id, hosts))
        self.started.add(job.id)
        self.version += 1

    def _reserve(self, job: QueuedJob, victims: Sequence[RunningJob] = ()) -> None:
        """The hosts it would use keep their free devices for it: where its victims free devices,
        else those with most free."""
        self.waiting_behind = max(self.waiting_behind or 0, job.priority)
        if victims:
            hosts: Iterable[str] = self._fitting(job, self._freed(victims)) or ()
        elif self._largest() == 0:
            return  # nothing free to keep
        else:
            candidates = sorted(
                (host for host in self.fleet.hosts if host.slots >= job.needed and (host.sandbox or not job.own_code)),
                key=lambda host: (-self.free[host.hostname], host.hostname),
            )
            hosts = [host.hostname for host in candidates[: job.nodes]]
        for hostname in hosts:
            if self.free[hostname]:
                self.free[hostname] = 0
                self.version += 1

    def _hand_over(self, job: QueuedJob, victims: Iterable[RunningJob]) -> None:
        """The job's owner is given its devices; the victims' owners hold theirs no more. An
        owner is judged for taking by what it holds or is given (which never falls in a
        decision), and for losing by what its running jobs still hold: no owner loses a job and
        takes another's devices back in one decision, or starts a job and loses another."""
        for victim in victims:
            self.holding[victim.owner] -= victim.devices
        self.in_use[job.owner] = self.in_use.get(job.owner, 0) + job.devices
        self.version += 1
        self.victims_version += 1

    # ---- victims ---------------------------------------------------------------------------------

    def _orphans(self, job: QueuedJob) -> list[RunningJob] | None:
        """Victims still stopping whose job no longer waits for them (it started on devices that
        came free first, or left the queue), as few as make room for `job`: their devices are
        freed anyway, and preempting another for `job` would take one job too many."""
        stopping = [
            victim
            for victim in self._stopping
            if victim.id not in self.adopted
            and (victim.preempting_for in self.started or victim.preempting_for not in self.fleet.queued_ids)
        ]
        if not stopping:
            return None
        usable = {host.hostname for host in self.fleet.hosts if host.sandbox or not job.own_code}
        freed = dict(self.free)
        chosen: list[RunningJob] = []
        for victim in sorted(stopping, key=lambda victim: victim.id):
            chosen.append(victim)
            for hostname in victim.hosts:
                if hostname in freed:
                    freed[hostname] += victim.needed
            if sum(1 for hostname in usable if freed[hostname] >= job.needed) >= job.nodes:
                return chosen
        return None

    def _victims(self, job: QueuedJob) -> list[RunningJob] | None:
        """As few running jobs as free the devices `job` needs, chosen in the contract's order;
        None when no allowed set does."""
        self._refresh()
        within_share = self.in_use.get(job.owner, 0) + job.devices <= self.fleet.share[job.owner]
        shape = (job.priority, job.needed, job.nodes, job.own_code, job.owner, within_share)
        if shape in self._no_victims:
            return None
        usable = {host.hostname for host in self.fleet.hosts if host.sandbox or not job.own_code}
        freed = dict(self.free)  # as the victims chosen so far stop
        fitting = {hostname for hostname in usable if freed[hostname] >= job.needed}
        chosen: list[RunningJob] = []
        for victim in self._victim_order:
            if victim.priority > job.priority or not self._may_take(victim, job, chosen, within_share):
                continue
            chosen.append(victim)
            for hostname in victim.hosts:
                if hostname in freed:
                    freed[hostname] += victim.needed
                    if hostname in usable and freed[hostname] >= job.needed:
                        fitting.add(hostname)
            if len(fitting) >= job.nodes:
                return self._spared(job, chosen)
        self._no_victims.add(shape)
        return None

    def _refresh(self) -> None:
        """The remembered figures, made again after a change."""
        if self._cache_version == self.version:
            return
        self._cache_version = self.version
        self._no_victims.clear()
        self._largest_free = max(self.free.values(), default=0)
        if self._order_version != self.victims_version:
            self._order_version = self.victims_version
            self._victim_order = self._ordered_victims()

    def _ordered_victims(self) -> list[RunningJob]:
        """The jobs that may still be preempted, in the order victims are taken: by their owner's
        devices above its share (the furthest first), then priority, start (the latest first) and
        id. The rest of the order never changes (`_old_enough` holds it), and Python's sort is
        stable: sorting that list by the owners' excess alone gives the whole order."""
        share, holding = self.fleet.share, self.holding
        above = {owner: holding.get(owner, 0) - share.get(owner, 0.0) for owner in share}
        allowed = [
            victim for victim in self._old_enough if victim.preempting_for is None and victim.id not in self.taken
        ]
        return sorted(allowed, key=lambda victim: -above[victim.owner])

    @cached_property
    def _stopping(self) -> list[RunningJob]:
        """The victims of earlier decisions, still checkpointing (few: the rest are running)."""
        return [victim for victim in self.fleet.running if victim.preempting_for is not None]

    @cached_property
    def _old_enough(self) -> list[RunningJob]:
        """The jobs that may ever be preempted here, lowest priority, latest start and id first."""
        rules = self.rules
        preemptible = [
            victim
            for victim in self.fleet.running
            if victim.preemptible and rules.now - victim.started_at >= rules.min_runtime_seconds
        ]
        return sorted(preemptible, key=lambda victim: (victim.priority, -victim.started_at, victim.id))

    def settled(self, priority: int) -> bool:
        """Nothing more can start or be preempted for any job after one of `priority` in the
        order (they are of that priority or lower): no device is free, and no victim is left
        that a job of that priority may take (a lower priority, or an owner above its share at
        the same priority)."""
        if self._largest() > 0:
            return False
        if not self.rules.preemption:
            return True
        share = self.fleet.share
        return not any(
            victim.priority < priority
            or (victim.priority == priority and self.holding.get(victim.owner, 0) > share[victim.owner])
            for victim in self._victim_order
        )

    def _largest(self) -> int:
        self._refresh()
        return self._largest_free

    def _may_take(self, victim: RunningJob, job: QueuedJob, chosen: list[RunningJob], within_share: bool) -> bool:
        if victim.priority < job.priority:
            return True
        also_lost = sum(other.devices for other in chosen if other.owner == victim.owner)
        victim_owner_left = self.holding.get(victim.owner, 0) - also_lost
        return within_share and victim.owner != job.owner and victim_owner_left > self.fleet.share[victim.owner]

    def _freed(self, victims: Iterable[RunningJob]) -> dict[str, int]:
        """Free devices per host once `victims` stopped."""
        freed = dict(self.free)
        for victim in victims:
            for hostname in victim.hosts:
                if hostname in freed:
                    freed[hostname] += victim.needed
        return freed

    def _freed_fit(self, job: QueuedJob, victims: list[RunningJob]) -> bool:
        return self._fitting(job, self._freed(victims)) is not None

    def _spared(self, job: QueuedJob, chosen: list[RunningJob]) -> list[RunningJob]:
        """Drop every victim the others free enough without, the last chosen first. A one-node
        job keeps only victims on the host it takes (the one the last victim completed)."""
        kept = list(chosen)
        if job.nodes == 1:
            target = next(h for h in chosen[-1].hosts if self._freed_fit(job, [v for v in chosen if h in v.hosts]))
            kept = [victim for victim in chosen if target in victim.hosts]
        for victim in reversed(list(kept)):
            without = [other for other in kept if other is not victim]
            if self._freed_fit(job, without):
                kept = without
        return kept
