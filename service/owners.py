"""Owners' sharing settings (`GET /v1/owners`, `PUT /v1/owners/{owner}`) and what they allow at
submit: a priority up to the owner's `max_priority` (admins' own jobs are not capped), and a
non-preemptible job only where `allow_non_preemptible`."""

from __future__ import annotations

from sqlalchemy.orm import Session

from trainjobs.contract.clock import utcnow
from trainjobs.contract.sharing import OwnerList, OwnerSettingsDocument, OwnerSettingsUpdate
from trainjobs.contract.spec import JobSpec
from trainjobs.jobs import queue
from trainjobs.jobs.errors import Forbidden, InvalidRequest
from trainjobs.jobs.repositories import owners
from trainjobs.jobs.tables import OwnerRow
from trainjobs.service.auth import Principal


def visible(session: Session, principal: Principal) -> OwnerList:
    """Every owner with settings, to an admin; a non-admin's own (their defaults if unset)."""
    if not principal.is_admin:
        return OwnerList(items=[queue.settings_of(session, principal.owner)])
    return OwnerList(items=[queue.document(row) for row in owners.all_settings(session)])


def put(session: Session, principal: Principal, owner: str, update: OwnerSettingsUpdate) -> OwnerSettingsDocument:
    if not principal.is_admin:
        raise Forbidden("only an admin may change an owner's sharing settings")
    row = OwnerRow(
        owner=owner,
        weight=update.weight,
        max_cuda=update.max_devices.cuda,
        max_cpu=update.max_devices.cpu,
        max_priority=update.max_priority,
        allow_non_preemptible=update.allow_non_preemptible,
        updated_at=utcnow(),
    )
    return queue.document(owners.put(session, row))


def check_allowed(session: Session, principal: Principal, spec: JobSpec) -> None:
    """422 naming the field when the owner's settings do not allow the spec's sharing fields."""
    settings = queue.settings_of(session, principal.owner)
    if spec.priority > settings.max_priority and not principal.is_admin:
        raise InvalidRequest(
            "priority", f"at most {settings.max_priority} for owner {principal.owner} (their max_priority)"
        )
    if not spec.preemptible and not settings.allow_non_preemptible:
        raise InvalidRequest(
            "preemptible", f"owner {principal.owner} may not submit non-preemptible jobs (allow_non_preemptible)"
        )
