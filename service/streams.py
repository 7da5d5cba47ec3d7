"""Open streams of an API process (`/events` and `/logs?follow=true`): how many may be open, and
one reader per job, however many streams follow it.

- **Caps.** A process holds at most `streams_per_process` open streams, and an owner at most
  `streams_per_owner` of them; past either the request is refused with 429 and `Retry-After`
  (`TooManyStreams`). Each stream holds a connection and a share of the event loop: without a
  cap, a few hundred open streams fill a core.
- **One reader per job.** The first stream of a job starts a `Feed` that reads what is new every
  `POLL_SECONDS` and keeps the latest `KEPT` items; every stream of that job in this process is
  served from it, and it stops when its last stream goes. A stream that asks for older items than
  the feed keeps (a `Last-Event-ID` from long ago) reads that gap itself, once.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections import Counter, deque
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

POLL_SECONDS = 0.5
KEPT = 2000  # items a feed keeps for the streams that follow it
RETRY_AFTER_SECONDS = 10


class TooManyStreams(Exception):
    """The process, or the caller, has as many streams open as allowed (the API answers 429)."""

    retry_after = RETRY_AFTER_SECONDS


ItemT = TypeVar("ItemT")


@dataclass(frozen=True)
class Batch(Generic[ItemT]):
    """What one read found: items with their positions (ascending), and whether the stream is over
    (nothing will follow the last of them)."""

    items: list[tuple[int, ItemT]]
    over: bool


Reader = Callable[[int], Awaitable[Batch[Any]]]  # read(after): what came after position `after`


class StreamLimits:
    """The open streams of this process, by owner. Admitted in a request's thread, released on the
    event loop when the stream ends: the count is kept under a lock."""

    def __init__(self, per_process: int, per_owner: int):
        self.per_process = per_process
        self.per_owner = per_owner
        self.open: Counter[str] = Counter()
        self._lock = threading.Lock()

    def admit(self, owner: str) -> Callable[[], None]:
        """Take a place for one of `owner`'s streams (TooManyStreams past a cap); the function
        returned gives it back, once."""
        with self._lock:
            if self.open.total() >= self.per_process:
                raise TooManyStreams(f"this API process has {self.per_process} streams open; try again later")
            if self.open[owner] >= self.per_owner:
                raise TooManyStreams(f"{owner} has {self.per_owner} streams open, the most one owner may")
            self.open[owner] += 1
        released = threading.Event()

        def release() -> None:
            with self._lock:
                if not released.is_set():
                    released.set()
                    self.open[owner] -= 1
                    if not self.open[owner]:
                        del self.open[owner]

        return release


@dataclass
class Feed(Generic[ItemT]):
    """One reader of one stream source (a job's events, an attempt's log lines) for every stream
    of it in this process. It holds every item after position `covered_after` that it has read."""

    read: Reader
    covered_after: int
    kept: deque[tuple[int, ItemT]] = field(default_factory=deque)
    over: bool = False
    followers: int = 0
    changed: asyncio.Event = field(default_factory=asyncio.Event)
    task: asyncio.Task[None] | None = None

    @property
    def position(self) -> int:
        return self.kept[-1][0] if self.kept else self.covered_after

    async def run(self) -> None:
        while self.followers and not self.over:
            try:
                batch = await self.read(self.position)
            except Exception as error:  # SQL away for a moment: the streams wait, and are kept alive
                log.warning("a stream's feed could not read (%s); trying again", error)
                await asyncio.sleep(4 * POLL_SECONDS)
                continue
            for item in batch.items:
                if len(self.kept) == KEPT:
                    self.covered_after = self.kept.popleft()[0]
                self.kept.append(item)
            self.over = batch.over
            if batch.items or batch.over:
                self.changed.set()  # wakes the streams waiting on it; they wait on a new one next
                self.changed = asyncio.Event()
            if not batch.items and not self.over:
                await asyncio.sleep(POLL_SECONDS)

    def after(self, position: int) -> list[tuple[int, ItemT]]:
        return [item for item in self.kept if item[0] > position]


class Feeds:
    """The feeds of this process, by source; `follow` is a stream's view of one."""

    def __init__(self) -> None:
        self.feeds: dict[Any, Feed[Any]] = {}

    async def follow(
        self, source: Any, read: Reader, after: int, idle: float | None = None
    ) -> AsyncIterator[list[tuple[int, Any]] | None]:
        """Yield each new run of items after position `after`, until the source is over; None
        after `idle` seconds with nothing new (for a keep-alive)."""
        feed = self._joined(source, read, after)
        try:
            while after < feed.covered_after:  # older than the feed holds: this stream reads it
                gap = [item for item in (await read(after)).items if item[0] <= feed.covered_after]
                after = gap[-1][0] if gap else feed.covered_after
                if gap:
                    yield gap
            while True:
                changed = feed.changed
                new = feed.after(after)
                if new:
                    after = new[-1][0]
                    yield new
                elif feed.over:
                    return
                else:
                    try:
                        await asyncio.wait_for(changed.wait(), idle)
                    except TimeoutError:
                        yield None
        finally:
            self._left(source, feed)

    def _joined(self, source: Any, read: Reader, after: int) -> Feed[Any]:
        feed = self.feeds.get(source)
        if feed is None:
            feed = self.feeds[source] = Feed(read=read, covered_after=after)
        feed.followers += 1
        if feed.task is None:
            feed.task = asyncio.get_running_loop().create_task(feed.run())
        return feed

    def _left(self, source: Any, feed: Feed[Any]) -> None:
        feed.followers -= 1
        if not feed.followers:
            if feed.task is not None:
                feed.task.cancel()
            if self.feeds.get(source) is feed:
                del self.feeds[source]
