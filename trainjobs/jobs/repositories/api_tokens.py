"""The api_tokens table. Only a token's SHA-256 is stored: tokens are 256-bit random strings,
so a fast hash is enough (no dictionary to attack) and lookup stays one indexed read."""

from __future__ import annotations

from sqlalchemy import select
from sqlalchemy.orm import Session

from trainjobs.contract.clock import utcnow
from trainjobs.jobs.tables import ApiTokenRow


def add(session: Session, token: ApiTokenRow) -> None:
    session.add(token)
    session.flush()


def find_active(session: Session, token_sha256: str) -> ApiTokenRow | None:
    return session.scalars(
        select(ApiTokenRow).where(ApiTokenRow.token_sha256 == token_sha256, ApiTokenRow.revoked_at.is_(None))
    ).one_or_none()


def list_all(session: Session) -> list[ApiTokenRow]:
    return list(session.scalars(select(ApiTokenRow).order_by(ApiTokenRow.created_at)))


def revoke(session: Session, token_id: str) -> bool:
    row = session.get(ApiTokenRow, token_id)
    if row is None or row.revoked_at is not None:
        return False
    row.revoked_at = utcnow()
    return True


def revoke_all_of(session: Session, owner: str) -> int:
    """Revoke every active token of `owner`; how many."""
    rows = session.scalars(select(ApiTokenRow).where(ApiTokenRow.owner == owner, ApiTokenRow.revoked_at.is_(None)))
    revoked = 0
    for row in rows:
        row.revoked_at = utcnow()
        revoked += 1
    return revoked
