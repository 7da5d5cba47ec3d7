"""Every /v1/ request is authenticated before anything else is done with it: a request without
a valid bearer token gets the contract's 401 whatever its body, and its body is never read or
parsed (no field names or catalog entries leak to an unauthenticated caller).

The caller is left in the request's state, where `unit_of_work` picks it up.
"""

from __future__ import annotations

import json

from sqlalchemy.orm import Session, sessionmaker
from starlette.concurrency import run_in_threadpool
from starlette.types import ASGIApp, Receive, Scope, Send

from trainjobs.service.auth import Principal, authenticate

PROTECTED_PREFIX = "/v1/"


class AuthenticationMiddleware:
    def __init__(self, app: ASGIApp, sessions: sessionmaker[Session]):
        self.app = app
        self.sessions = sessions

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not scope["path"].startswith(PROTECTED_PREFIX):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        scheme, _, token = headers.get(b"authorization", b"").decode("latin-1").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            await _unauthorized(send, "missing bearer token")
            return
        caller = await run_in_threadpool(self._authenticate, token.strip())
        if caller is None:
            await _unauthorized(send, "invalid or revoked token")
            return
        scope.setdefault("state", {})["caller"] = caller
        await self.app(scope, receive, send)

    def _authenticate(self, token: str) -> Principal | None:
        with self.sessions() as session:
            return authenticate(session, token)


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
