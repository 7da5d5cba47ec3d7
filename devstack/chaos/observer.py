"""Who runs where, seen from outside: every 0.1 s, each live rank process on this machine and the
job and attempt it belongs to (told by its rank log, which its stdout points at:
.../<job>/attempt<N>/rank<R>.log, or a sandbox's .../<job>-a<N>/rank<R>.log). Two attempts of one
job seen alive in the same look are a job run twice at once. An overlap shorter than the interval
can slip between two looks; the overlaps the review found last seconds."""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

RANK_LOG = re.compile(r"/(?P<job>[^/]+?)(?:/attempt|-a)(?P<attempt>\d+)/rank\d+\.log$")
INTERVAL_SECONDS = 0.1


@dataclass
class Sightings:
    """(job, attempt) -> first and last moment a rank of it was seen alive; the overlaps found."""

    spans: dict[tuple[str, int], list[float]] = field(default_factory=dict)
    overlaps: dict[str, set[int]] = field(default_factory=dict)  # job -> the attempts seen together


class RankObserver:
    def __init__(self, job_ids: set[str]):
        self.job_ids = job_ids  # the run's jobs (shared with the stream, which adds to it)
        self.seen = Sightings()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, name="rank-observer", daemon=True)

    def start(self) -> RankObserver:
        self._thread.start()
        return self

    def stop(self) -> Sightings:
        self._stop.set()
        self._thread.join(timeout=10)
        return self.seen

    def _watch(self) -> None:
        while not self._stop.wait(INTERVAL_SECONDS):
            now = time.monotonic()
            alive: dict[str, set[int]] = {}
            for job_id, attempt in _live_ranks():
                if job_id in self.job_ids:
                    alive.setdefault(job_id, set()).add(attempt)
                    span = self.seen.spans.setdefault((job_id, attempt), [now, now])
                    span[1] = now
            for job_id, attempts in alive.items():
                if len(attempts) > 1:
                    self.seen.overlaps.setdefault(job_id, set()).update(attempts)


def _live_ranks() -> list[tuple[str, int]]:
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            match = RANK_LOG.search(os.readlink(f"/proc/{entry}/fd/1"))
            if match is None or "State:\tZ" in Path(f"/proc/{entry}/status").read_text():
                continue
        except OSError:
            continue
        found.append((match["job"], int(match["attempt"])))
    return found
