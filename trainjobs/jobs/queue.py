"""A device type's queue as the sharing rule reads it, and the decision for it.

The rule (trainjobs.jobs.sharing) is pure; this module gathers its input: the queued jobs and
the jobs holding devices (SQL), the owners' settings (SQL) and the live workers (their
heartbeats, with the asking worker's own free devices as it knows them). The worker that takes a
job, the API leader's sweep and `GET /v1/queue` all decide through `decision`.
"""

from __future__ import annotations

from collections.abc import Sequence

from sqlalchemy.orm import Session

from trainjobs.contract.sharing import MaxDevices, OwnerSettingsDocument
from trainjobs.contract.spec import devices_per_node
from trainjobs.contract.workers import WorkerStatus
from trainjobs.jobs.repositories import jobs, owners
from trainjobs.jobs.sharing import Decision, Host, OwnerSettings, QueuedJob, Rules, RunningJob, decide
from trainjobs.jobs.tables import OwnerRow


def decision(
    session: Session,
    device: str,
    workers: Sequence[WorkerStatus],
    rules: Rules,
    explain: bool = True,
    free_here: tuple[str, int] | None = None,
) -> Decision:
    """The rule's decision for `device` now. `free_here`: (hostname, free devices) of the worker
    asking, which knows its own better than its last heartbeat says."""
    queued = [_queued(row) for row in jobs.queued_of(session, device)]
    running = [_running(row) for row in jobs.holding_devices(session, device)]
    held: dict[str, int] = {}  # by worker, as SQL has it now (a heartbeat may be seconds old)
    for job in running:
        for hostname in job.hosts:
            held[hostname] = held.get(hostname, 0) + job.needed
    hosts = [_host(worker, held.get(worker.hostname, 0), free_here) for worker in workers if worker.device == device]
    return decide(device, hosts, running, queued, owner_settings(session), rules, explain=explain)


def owner_settings(session: Session) -> dict[str, OwnerSettings]:
    return {row.owner: _settings(row) for row in owners.all_settings(session)}


def settings_of(session: Session, owner: str) -> OwnerSettingsDocument:
    """An owner's settings document (the defaults when it has no row)."""
    row = owners.get(session, owner)
    if row is None:
        return OwnerSettingsDocument(owner=owner)
    return document(row)


def document(row: OwnerRow) -> OwnerSettingsDocument:
    return OwnerSettingsDocument(
        owner=row.owner,
        weight=row.weight,
        max_devices=MaxDevices(cuda=row.max_cuda, cpu=row.max_cpu),
        max_priority=row.max_priority,
        allow_non_preemptible=row.allow_non_preemptible,
    )


def _settings(row: OwnerRow) -> OwnerSettings:
    return OwnerSettings(
        owner=row.owner,
        weight=row.weight,
        max_devices={"cuda": row.max_cuda, "cpu": row.max_cpu},
        max_priority=row.max_priority,
        allow_non_preemptible=row.allow_non_preemptible,
    )


def _host(worker: WorkerStatus, held: int, free_here: tuple[str, int] | None) -> Host:
    """A live worker's slots, less the devices SQL says its jobs hold (the asking worker's own
    count where given: it also knows of leases it holds before a claim)."""
    free = worker.slots - held
    if free_here is not None and free_here[0] == worker.hostname:
        free = free_here[1]
    return Host(worker.hostname, worker.slots, max(0, free), worker.sandbox)


def _queued(row) -> QueuedJob:
    job_id, owner, gpus, nodes, priority, _queued_at, created_at, own_code, preempted_by = row
    return QueuedJob(
        id=job_id,
        owner=owner,
        needed=devices_per_node(gpus, nodes),
        created_at=created_at.timestamp(),
        priority=priority,
        nodes=nodes,
        own_code=bool(own_code),
        preempted_by=preempted_by,
    )


def _running(row) -> RunningJob:
    job_id, owner, gpus, nodes, workers, priority, preemptible, started_at, preempting_for, state = row
    return RunningJob(
        id=job_id,
        owner=owner,
        needed=devices_per_node(gpus, nodes),
        hosts=tuple(workers or ()),
        priority=priority,
        preemptible=preemptible and state == "running",  # a job already leaving is nobody's victim
        started_at=started_at.timestamp() if started_at else 0.0,
        preempting_for=preempting_for,
    )
