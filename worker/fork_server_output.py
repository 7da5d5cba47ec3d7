"""Where a launcher's fork server writes: a file of that launcher's own (by its pid), so that what
a rank prints before its own error file exists (an import that fails as the fork server starts
it, a sandbox that cannot run Python) reaches its job's error. The fork server keeps the output it
was started with, and a waiting launcher starts it before it knows its job; without this it went
to the host's launchers.log, and the job said only "rank 0 failed (exit code 1)"."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

TAIL_BYTES = 64 * 1024


def fork_server_log() -> Path:
    """This launcher's fork server's output (the launcher's, root's, 0600)."""
    return Path(tempfile.gettempdir()) / f"trainjobs-forkserver-{os.getpid()}.log"


@contextlib.contextmanager
def fork_server_output() -> Iterator[None]:
    """While a fork server starts: our stdout and stderr are its log file, then ours again."""
    descriptor = os.open(fork_server_log(), os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    saved = [os.dup(1), os.dup(2)]
    try:
        os.dup2(descriptor, 1)
        os.dup2(descriptor, 2)
        yield
    finally:
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        for kept in (*saved, descriptor):
            os.close(kept)


def fork_server_written() -> int:
    """How much it has written so far: what comes later is about the ranks started after now (a
    rank's own output goes to its rank log from its first line of training on)."""
    try:
        return fork_server_log().stat().st_size
    except OSError:
        return 0


def fork_server_tail(lines: int, since: int = 0) -> str | None:
    """Its last `lines` lines written past `since`, or None where it wrote nothing there (what it
    said as it warmed up, before the job's ranks were started, is not about them)."""
    try:
        with open(fork_server_log(), "rb") as log:
            log.seek(max(since, log.seek(0, os.SEEK_END) - TAIL_BYTES))
            text = log.read().decode(errors="replace").strip()
    except OSError:
        return None
    return "\n".join(text.splitlines()[-lines:]) or None


def remove_fork_server_log() -> None:
    fork_server_log().unlink(missing_ok=True)
