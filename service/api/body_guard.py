"""Request bodies are read whole, within a bound, and checked before the app parses them.

- Over `max_bytes` (declared by Content-Length, or counted for a chunked body): 413, and the
  rest is never read.
- A JSON body that is not UTF-8, or nests deeper than Python's parser can follow: 422 naming the
  body. (Left to the framework, both were a 400 "error parsing the body".)
"""

from __future__ import annotations

import json
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

BODY_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# Routes that stream their body and bound it themselves (a code archive: up to 100 MiB).
STREAMED = {("POST", "/v1/code")}


class BodyGuardMiddleware:
    def __init__(self, app: ASGIApp, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope["method"] not in BODY_METHODS
            or (scope["method"], scope["path"]) in STREAMED
        ):
            await self.app(scope, receive, send)
            return
        headers = dict(scope.get("headers") or [])
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await _answer(send, 413, f"request body over {self.max_bytes} bytes")
            return
        body = await self._read_bounded(receive)
        if body is None:
            await _answer(send, 413, f"request body over {self.max_bytes} bytes")
            return
        if body and b"json" in headers.get(b"content-type", b""):
            problem = _json_problem(body)
            if problem is not None:
                await _answer(send, 422, [{"loc": ["body"], "msg": problem, "type": "value_error"}])
                return
        await self.app(scope, _replay(body, receive), send)

    async def _read_bounded(self, receive: Receive) -> bytes | None:
        """The whole body, or None as soon as it passes the bound."""
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return b"".join(chunks)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > self.max_bytes:
                return None
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _json_problem(body: bytes) -> str | None:
    try:
        json.loads(body.decode("utf-8"))
    except UnicodeDecodeError:
        return "the body is not UTF-8"
    except RecursionError:
        return "the JSON nests too deeply"
    except ValueError:
        return None  # not JSON at all: the framework's own 422 says where
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()  # after the body: the disconnect, when it comes

    return replay


async def _answer(send: Send, status: int, detail: Any) -> None:
    body = json.dumps({"detail": detail}).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())],
        }
    )
    await send({"type": "http.response.body", "body": body})
