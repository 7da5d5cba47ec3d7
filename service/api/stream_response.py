"""A streaming answer that holds one of the process's stream places (service.streams) until it
ends, however it ends: finished, failed, or its client gone."""

from __future__ import annotations

from collections.abc import AsyncIterable, Callable
from typing import Any

from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send


class AdmittedStream(StreamingResponse):
    def __init__(self, content: AsyncIterable[str], release: Callable[[], None], **options: Any):
        super().__init__(content, **options)
        self.release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self.release()
