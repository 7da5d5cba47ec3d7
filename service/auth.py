"""Bearer tokens: created by `trainjobs token create`, stored as SHA-256, scoped to an owner."""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

from sqlalchemy.orm import Session

from trainjobs.contract.clock import utcnow
from trainjobs.jobs.repositories import api_tokens
from trainjobs.jobs.tables import ApiTokenRow

TOKEN_PREFIX = "tj_"


@dataclass(frozen=True)
class Principal:
    owner: str
    is_admin: bool

    def can_see(self, owner: str) -> bool:
        return self.is_admin or owner == self.owner


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def create_token(session: Session, owner: str, is_admin: bool = False) -> str:
    """Store a new token for `owner` and return it: the only time it is ever readable."""
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    api_tokens.add(
        session,
        ApiTokenRow(
            id=secrets.token_hex(8),
            owner=owner,
            is_admin=is_admin,
            token_sha256=hash_token(token),
            created_at=utcnow(),
        ),
    )
    return token


def authenticate(session: Session, token_sha256: str) -> Principal | None:
    row = api_tokens.find_active(session, token_sha256)
    return Principal(owner=row.owner, is_admin=row.is_admin) if row else None
