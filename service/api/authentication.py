"""Every /v1/ request is authenticated before anything else is done with it: a request without
a valid bearer token gets the contract's 401 whatever its body, and its body is never read or
parsed (no field names or catalog entries leak to an unauthenticated caller).

The caller is left in the request's state, where `unit_of_work` picks it up.

A token's owner is remembered for `cache_seconds` (TRAINJOBS_TOKEN_CACHE_SECONDS) per API
process, keyed by the token's SHA-256: a dashboard polling every second costs no SQL read for its
token, and a revoked token stops working within that time. Refusals are not remembered.
"""

from __future__ import annotations

import json
import time

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from trainjobs.service.auth import Principal, authenticate, hash_token

PROTECTED_PREFIX = "/v1/"
# Answered without a token (Prometheus scrapers expect it); a valid token is still noted, and an
# admin's shows the series labelled by job and owner.
OPTIONALLY_AUTHENTICATED = ("/metrics",)
CACHED_TOKENS_MAX = 10_000  # past this many, the cache starts over (a bound, not a working size)


class AuthenticationMiddleware:
    def __init__(self, app: ASGIApp, sessions: sessionmaker[Session], cache_seconds: float):
        self.app = app
        self.sessions = sessions
        self.cache_seconds = cache_seconds
        self._known: dict[str, tuple[Principal, float]] = {}  # token SHA-256 -> caller, until

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PROTECTED_PREFIX):
            if scope["type"] == "http" and scope["path"] in OPTIONALLY_AUTHENTICATED:
                await self._note_caller(scope)
            await self.app(scope, receive, send)
            return
        scheme, token = _bearer(scope)
        if scheme.lower() != "bearer" or not token.strip():
            await _unauthorized(send, "missing bearer token")
            return
        caller = await self._caller(token.strip())
        if caller is None:
            await _unauthorized(send, "invalid or revoked token")
            return
        scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, receive, send)

    async def _note_caller(self, scope: Scope) -> None:
        scheme, token = _bearer(scope)
        caller = await self._caller(token.strip()) if scheme.lower() == "bearer" and token.strip() else None
        if caller is not None:
            scope.setdefault("state", {})["caller"] = caller

    async def _caller(self, token: str) -> Principal | None:
        digest = hash_token(token)
        known = self._known.get(digest)
        now = time.monotonic()
        if known is not None and known[1] > now:
            return known[0]
        caller = await run_in_threadpool(self._authenticate, digest)
        if caller is not None and self.cache_seconds > 0:
            if len(self._known) >= CACHED_TOKENS_MAX:
                self._known.clear()
            self._known[digest] = (caller, now + self.cache_seconds)
        return caller

    def _authenticate(self, digest: str) -> Principal | None:
        with self.sessions() as session:
            return authenticate(session, digest)


def _bearer(scope: Scope) -> tuple[str, str]:
    headers = dict(scope.get("headers") or [])
    scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
    return scheme, token


async def _unauthorized(send: Send, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": 401,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"www-authenticate", b"Bearer"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
