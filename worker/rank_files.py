"""Reading what ranks wrote in their folder (logs, errors, the result, checkpoint files), from the
launcher, outside the sandbox: a rank owns that folder and could put a link in it to a file of the
host's. Each file is opened through its folder's descriptors without following any link, and
must be a regular file: a link, or a folder of links, is refused, never followed."""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import BinaryIO


class NotARankFile(OSError):
    """The name is not a regular file in the rank's folder (missing, a link, something else)."""


def open_rank_file(folder: Path, relative: str) -> BinaryIO:
    parts = Path(relative).parts
    if not parts or any(part in ("..", "/") for part in parts):
        raise NotARankFile(f"{relative!r} is not a file name in the rank's folder")
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory)
            os.close(directory)
            directory = inner
        try:
            descriptor = os.open(parts[-1], os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
        except OSError as error:
            raise NotARankFile(f"{relative}: {error.strerror}") from None
    finally:
        os.close(directory)
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise NotARankFile(f"{relative} is not a regular file")
    return os.fdopen(descriptor, "rb")


def read_rank_text(folder: Path, relative: str, limit: int = 1 << 20) -> str | None:
    """The file's text (its first `limit` bytes), or None where there is no such regular file."""
    try:
        with open_rank_file(folder, relative) as file:
            return file.read(limit).decode("utf-8", "replace")
    except (NotARankFile, OSError):
        return None
