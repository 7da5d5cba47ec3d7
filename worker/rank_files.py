"""Reading what ranks wrote in their folder (logs, errors, the result, checkpoint files), from the
launcher, outside the sandbox: a rank owns that folder and could put a link in it to a file of the
host's. Each file is opened through its folder's descriptors without following any link, and
must be a regular file: a link, or a folder of links, is refused, never followed; a file is
removed the same way, and the folder is walked without recursion. What of it
reaches the job's owner names no path of the server (`without_server_paths`)."""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from trainjobs.contract.run import RunRequest

RANKS_FOLDER = "ranks"  # where an attempt's run folder keeps its ranks' folder once they are gone


class NotARankFile(OSError):
    """The name is not a regular file in the rank's folder (missing, a link, something else)."""


def open_rank_file(folder: Path, relative: str) -> BinaryIO:
    with _parent_folder(folder, relative) as (directory, name):
        try:
            descriptor = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=directory)
        except OSError as error:
            raise NotARankFile(f"{relative}: {error.strerror}") from None
    if not stat.S_ISREG(os.fstat(descriptor).st_mode):
        os.close(descriptor)
        raise NotARankFile(f"{relative} is not a regular file")
    return os.fdopen(descriptor, "rb")


def remove_rank_file(folder: Path, relative: str) -> None:
    """Remove the entry `relative` in the rank's folder (a file, or a link itself: never what a
    link points to, nor anything through a folder that is a link); nothing if it is not there."""
    try:
        with _parent_folder(folder, relative) as (directory, name):
            os.unlink(name, dir_fd=directory)
    except (FileNotFoundError, NotARankFile):
        pass


@contextmanager
def _parent_folder(folder: Path, relative: str) -> Iterator[tuple[int, str]]:
    """The open descriptor of the folder that holds `relative`, reached from `folder` one part at
    a time without following a link, and the last part's name."""
    parts = Path(relative).parts
    if not parts or any(part in ("..", "/") for part in parts):
        raise NotARankFile(f"{relative!r} is not a file name in the rank's folder")
    directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        for part in parts[:-1]:
            try:
                inner = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory)
            except OSError as error:  # ELOOP or ENOTDIR for a link
                raise NotARankFile(f"{relative}: {part}: {error.strerror}") from None
            os.close(directory)
            directory = inner
        yield directory, parts[-1]
    finally:
        os.close(directory)


def remove_rank_tree(folder: Path) -> None:
    """Remove `folder` and all under it, however deep, holding one folder descriptor at a time
    (shutil.rmtree recurses, and a path thousands of folders deep is past PATH_MAX) and following
    no link. For a ranks' folder once its ranks are gone: nothing moves under it meanwhile."""
    try:
        directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except FileNotFoundError:
        return
    names: list[str] = []  # the way down from `folder`
    while True:
        inner = _empty_all_but_one_folder(directory)
        if inner is not None:
            child = os.open(inner, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory)
            os.close(directory)
            directory, names = child, [*names, inner]
            continue
        if not names:
            os.close(directory)
            os.rmdir(folder)
            return
        parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=directory)
        os.close(directory)
        os.rmdir(names.pop(), dir_fd=parent)
        directory = parent


def _empty_all_but_one_folder(directory: int) -> str | None:
    """Unlink every file and link in the open folder; the name of a folder in it, if any is left.
    Scanned again until a pass unlinks nothing: a scan that unlinks as it goes may skip entries."""
    unlinked = True
    while unlinked:
        unlinked = False
        with os.scandir(directory) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    return entry.name
                os.unlink(entry.name, dir_fd=directory)
                unlinked = True
    return None


def rank_file_stats(folder: Path) -> Iterator[os.stat_result]:
    """The lstat of every file (and link) under `folder`, however deep, following no link: one
    folder descriptor held at a time, no recursion and no path past PATH_MAX (a rank may nest
    folders thousands deep to hide what they hold). The way back up is checked to be the way
    down; where the ranks moved a folder meanwhile, the walk ends with what it saw."""
    try:
        directory = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return
    way_down: list[tuple[int, int]] = []  # (device, inode) of each folder above this one
    unvisited: list[list[str]] = []  # at each level, the folders still to go into
    try:
        while True:
            folders: list[str] = []
            for entry in _entries_of(directory):
                try:
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.name)
                    else:
                        yield entry.stat(follow_symlinks=False)
                except OSError:
                    continue
            unvisited.append(folders)
            directory = _next_folder(directory, unvisited, way_down)
            if directory < 0:
                return
    finally:
        if directory >= 0:
            os.close(directory)


def _next_folder(directory: int, unvisited: list[list[str]], way_down: list[tuple[int, int]]) -> int:
    """The next folder of a depth-first walk, from the open `directory` (closed here): down into
    an unvisited one, else up until there is one; -1 at the end."""
    while unvisited:
        if unvisited[-1]:
            try:
                child = os.open(unvisited[-1].pop(), os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=directory)
            except OSError:
                continue
            here = os.fstat(directory)
            way_down.append((here.st_dev, here.st_ino))
            os.close(directory)
            return child
        unvisited.pop()
        if not way_down:
            break
        parent = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=directory)
        os.close(directory)
        directory = parent
        there = os.fstat(directory)
        if (there.st_dev, there.st_ino) != way_down.pop():
            break
    os.close(directory)
    return -1


def _entries_of(directory: int) -> list[os.DirEntry]:
    try:
        with os.scandir(directory) as entries:
            return list(entries)
    except OSError:
        return []


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
