"""Sleep until a file in a directory is created or written (Linux inotify), for a thread that
would otherwise wake on a timer to look.

Why: the launcher shares the host with the job's ranks, and a process that wakes twice a second
for nothing takes a little from them. Rank logs are written in bursts (start-up, an epoch's end, a traceback) and
are quiet in between: a shipper that sleeps until a rank writes wakes a few times a job instead of
twice a second.

inotify is reached through libc with ctypes: the standard library has no binding, and three calls
do not justify a dependency. Where it is missing (not Linux, or the host's inotify limits are
spent), `DirectoryChanges.open` returns None and the caller polls as before.
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import select
import struct
from pathlib import Path

log = logging.getLogger(__name__)

IN_MODIFY = 0x00000002  # a file in the directory was written
IN_CREATE = 0x00000100  # a file was created in it
IN_NONBLOCK = os.O_NONBLOCK
IN_CLOEXEC = os.O_CLOEXEC
EVENT_HEADER = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then len bytes of name


def _libc() -> ctypes.CDLL | None:
    """The C library this process already has loaded (find_library would run ldconfig)."""
    libc = ctypes.CDLL(None, use_errno=True)
    return libc if hasattr(libc, "inotify_init1") else None


class DirectoryChanges:
    """Names of files created or written in one directory, waited for with a timeout; `interrupt`
    ends a wait from another thread."""

    def __init__(self, inotify_fd: int):
        self._fd = inotify_fd
        self._interrupt_read, self._interrupt_write = os.pipe()

    @classmethod
    def open(cls, directory: Path) -> DirectoryChanges | None:
        libc = _libc()
        if libc is None:
            return None
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            log.warning("inotify unavailable (%s); polling instead", os.strerror(ctypes.get_errno()))
            return None
        if libc.inotify_add_watch(fd, os.fsencode(directory), IN_MODIFY | IN_CREATE) < 0:
            log.warning("cannot watch %s (%s); polling instead", directory, os.strerror(ctypes.get_errno()))
            os.close(fd)
            return None
        return cls(fd)

    def wait(self, timeout_seconds: float | None) -> set[str]:
        """The names changed since the last wait, once there are any; empty after `timeout_seconds`
        with none, or when interrupted."""
        readable, _, _ = select.select([self._fd, self._interrupt_read], [], [], timeout_seconds)
        if self._interrupt_read in readable:
            os.read(self._interrupt_read, 64)
        return self._drain() if self._fd in readable else set()

    def interrupt(self) -> None:
        os.write(self._interrupt_write, b"x")

    def close(self) -> None:
        for fd in (self._fd, self._interrupt_read, self._interrupt_write):
            os.close(fd)

    def _drain(self) -> set[str]:
        names: set[str] = set()
        while True:
            try:
                data = os.read(self._fd, 64 * 1024)
            except BlockingIOError:
                return names
            except OSError as error:
                if error.errno == errno.EINTR:
                    continue
                raise
            offset = 0
            while offset + EVENT_HEADER.size <= len(data):
                _, _, _, length = EVENT_HEADER.unpack_from(data, offset)
                offset += EVENT_HEADER.size
                names.add(data[offset : offset + length].rstrip(b"\0").decode(errors="replace"))
                offset += length
