"""Ships every rank's output to the service while the job runs, so the API serves logs from a
host that shares no disk with the workers (and keeps them after a worker is lost).

The launcher runs one shipper: a thread that sleeps until a rank writes to its `rank<N>.log`
(trainjobs.worker.directory_changes), then sends the new lines of each as `logs` events, in
batches, over the job's event stream, and waits `every_seconds` (SHIP_EVERY_SECONDS) before it
looks again, so that a rank that writes all the time costs one batch per interval. Where inotify
is missing it reads every `every_seconds` instead.

Lines are numbered per rank, so a batch sent twice is kept once. The last batch goes out when the
launcher stops the shipper, before it reports the job's final state: the service has every line
by the time the job ends. The service keeps at most TRAINJOBS_LOG_LINES_PER_JOB lines a job; the
files on the worker keep everything.
"""

from __future__ import annotations

import logging
import re
import threading
from collections.abc import Callable
from pathlib import Path

from pydantic import BaseModel

from trainjobs.contract.events import MAX_LOG_LINE_CHARS, MAX_LOG_LINES_PER_EVENT, LogLines
from trainjobs.worker.directory_changes import DirectoryChanges
from trainjobs.worker.rank_files import NotARankFile, open_rank_file

log = logging.getLogger(__name__)

RANK_LOG = re.compile(r"^rank(\d+)\.log$")
# New lines reach the service within this, and all of them before the job's end is reported: a host
# lost seconds into a job must still have shipped its first lines (tests/e2e/test_hosts.py).
SHIP_EVERY_SECONDS = 0.5
# With inotify, a look at the files this often even when no change was seen: a backstop only.
LOOK_ANYWAY_SECONDS = 60.0


class RankLog:
    """One rank's log file, read from where the last read stopped; whole lines only."""

    def __init__(self, folder: Path, path: Path, rank: int):
        self.folder = folder
        self.path = path
        self.rank = rank
        self.offset = 0  # bytes read
        self.next_line = 0  # number of the next whole line
        self.partial = b""  # a line not yet ended by a newline

    def new_lines(self, final: bool) -> list[str]:
        try:  # never through a link a rank put there (trainjobs.worker.rank_files)
            with open_rank_file(self.folder, self.path.name) as file:
                file.seek(self.offset)
                data = file.read()
        except NotARankFile:
            data = b""
        self.offset += len(data)
        text = self.partial + data
        *whole, self.partial = text.split(b"\n")
        if final and self.partial:
            whole.append(self.partial)
            self.partial = b""
        return [_clip(line.decode("utf-8", "replace").rstrip("\r")) for line in whole]


def _clip(line: str) -> str:
    return line if len(line) <= MAX_LOG_LINE_CHARS else line[: MAX_LOG_LINE_CHARS - 1] + "…"


class LogShipper:
    def __init__(
        self,
        run_path: Path,
        send: Callable[[BaseModel], None],
        every_seconds: float = SHIP_EVERY_SECONDS,
        cap_lines: int | None = None,
    ):
        self.run_path = run_path
        self.send = send
        self.every_seconds = every_seconds
        # The service keeps at most this many lines a job (TRAINJOBS_LOG_LINES_PER_JOB): past it
        # nothing more is sent (the lines stay in the rank files), instead of sending what the
        # collector would only drop.
        self.cap_lines = cap_lines
        self.sent_lines = 0
        self.logs: dict[int, RankLog] = {}
        self._stop = threading.Event()
        self._changes: DirectoryChanges | None = None
        self._thread = threading.Thread(target=self._run, name="trainjobs-log-shipper", daemon=True)

    def start(self) -> LogShipper:
        self._changes = DirectoryChanges.open(self.run_path)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Ship what is left, including a last line without a newline, then stop."""
        self._stop.set()
        if self._changes is not None:
            self._changes.interrupt()
        if self._thread.ident is not None:
            self._thread.join(timeout=30)
        if self._changes is not None and not self._thread.is_alive():
            self._changes.close()
        self.ship(final=True)

    def ship(self, final: bool = False) -> None:
        if self.cap_lines is not None and self.sent_lines > self.cap_lines:
            return
        for path in sorted(self.run_path.glob("rank*.log")):
            match = RANK_LOG.match(path.name)
            if match is None:
                continue
            rank = int(match.group(1))
            rank_log = self.logs.setdefault(rank, RankLog(self.run_path, path, rank))
            lines = rank_log.new_lines(final)
            for start in range(0, len(lines), MAX_LOG_LINES_PER_EVENT):
                batch = lines[start : start + MAX_LOG_LINES_PER_EVENT]
                self.send(LogLines(rank=rank, first_line=rank_log.next_line, lines=batch))
                rank_log.next_line += len(batch)
                self.sent_lines += len(batch)

    def _run(self) -> None:
        while not self._stop.wait(self.every_seconds):
            if self._changes is not None:
                changed = self._changes.wait(LOOK_ANYWAY_SECONDS)
                if self._stop.is_set():
                    return
                if changed and not any(RANK_LOG.match(name) or not name for name in changed):
                    continue  # the launcher's own log, say ("": the kernel's queue overflowed: look)
            try:
                self.ship()
            except Exception:
                # Logs are a convenience: a failed batch must not stop the job. The lines are
                # still in the file, and the next pass sends what follows.
                log.exception("shipping rank logs failed")
