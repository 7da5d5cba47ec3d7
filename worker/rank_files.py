"""Reading what ranks wrote in their folder (logs, errors, the result, checkpoint files), from the
launcher, outside the sandbox: a rank owns that folder and could put a link in it to a file of the
host's. Each file is opened through its folder's descriptors without following any link, and
must be a regular file: a link, or a folder of links, is refused, never followed. What of it
reaches the job's owner names no path of the server (`without_server_paths`)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import BinaryIO

from trainjobs.contract.run import RunRequest


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


def append_rank_text(folder: Path, name: str, text: str) -> None:
    """Add `text` to the file `name` directly in the rank's folder (made if missing, never through
    a link): what the launcher knows of a rank that died before it could write its own log."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK  # a FIFO: no wait
    try:
        descriptor = os.open(folder / name, flags, 0o644)
    except OSError:
        return
    with os.fdopen(descriptor, "a", encoding="utf-8") as file:
        if stat.S_ISREG(os.fstat(descriptor).st_mode):
            file.write(text.rstrip("\n") + "\n")


def without_server_paths(text: str, request: RunRequest) -> str:
    """A job's error is shown to its owner: it names files by their place in the job's own
    folders, or by file name, never by the server's absolute paths."""
    for root, name in (
        (request.data_root, "<data>"),
        (request.checkpoint_dir, "<checkpoints>"),
        (request.rank_dir, "<run>"),
        (request.run_dir, "<run>"),
        (request.code_dir, "<code>"),
        (request.packages_dir, "<packages>"),
    ):
        if root:
            text = text.replace(root.rstrip("/") + "/", name + "/")
    return re.sub(r'File "(?:[^"]*/)?([^"/]+)"', r'File "\1"', text)
