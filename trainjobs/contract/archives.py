"""What a code archive may hold, checked member by member before anything of it is kept: the API
checks an upload, and a worker checks the archive again as it unpacks it (it trusts nothing that
reached the store). Regular files and folders only, each under the archive's root: no absolute
path, no `..`, no link, no device, and no more than a bound of files and of bytes unpacked."""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from trainjobs.contract.code import MAX_FILES


class UnsafeArchive(ValueError):
    """The archive, or one of its members (`member`), is refused; `reason` says why."""

    def __init__(self, member: str | None, reason: str):
        super().__init__(f"{member}: {reason}" if member else reason)
        self.member = member
        self.reason = reason


@dataclass(frozen=True)
class ArchiveSummary:
    files: int
    unpacked_bytes: int


def scan(archive: IO[bytes], max_unpacked_bytes: int) -> ArchiveSummary:
    """Read the whole archive once, checking every member; nothing is written."""
    return _walk(archive, max_unpacked_bytes, destination=None)


def unpack(archive: IO[bytes], destination: Path, max_unpacked_bytes: int) -> ArchiveSummary:
    """Check every member and write it under `destination` (which must exist and be empty):
    files read-only (executable where the archive says so), folders closed for writing after."""
    return _walk(archive, max_unpacked_bytes, destination)


def _walk(archive: IO[bytes], max_unpacked_bytes: int, destination: Path | None) -> ArchiveSummary:
    files = unpacked = 0
    try:
        with tarfile.open(fileobj=archive, mode="r|gz") as tar:
            for member in tar:
                name = checked_name(member)
                if member.isdir():
                    if destination is not None:
                        (destination / name).mkdir(parents=True, exist_ok=True)
                    continue
                files += 1
                unpacked += member.size
                if files > MAX_FILES:
                    raise UnsafeArchive(member.name, f"more than {MAX_FILES} files")
                if unpacked > max_unpacked_bytes:
                    raise UnsafeArchive(member.name, f"the files come to more than {max_unpacked_bytes} bytes unpacked")
                if destination is not None:
                    _write(tar, member, destination / name)
    except (tarfile.TarError, EOFError, OSError) as error:
        if isinstance(error, UnsafeArchive):
            raise
        raise UnsafeArchive(None, f"not a gzip'd tar: {error}") from None
    if destination is not None:
        _close_folders(destination)
    return ArchiveSummary(files=files, unpacked_bytes=unpacked)


def _close_folders(destination: Path) -> None:
    """Every folder readable by all (a sandbox's user reads it) and writable by none, whatever
    the umask made of it, the deepest first."""
    for root, folders, _files in os.walk(destination, topdown=False):
        for folder in folders:
            os.chmod(os.path.join(root, folder), 0o555)


def checked_name(member: tarfile.TarInfo) -> str:
    """The member's path under the archive's root; UnsafeArchive for anything but a regular file
    or folder there."""
    name = member.name
    if member.issym() or member.islnk():
        raise UnsafeArchive(name, f"a link (to {member.linkname!r}) is not allowed")
    if not (member.isfile() or member.isdir()):
        raise UnsafeArchive(name, "only regular files and folders are allowed (not a device, fifo or socket)")
    if name.startswith("/"):
        raise UnsafeArchive(name, "an absolute path is not allowed")
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafeArchive(name, "a '..' part is not allowed")
    if not parts:
        return "."
    return posixpath.join(*parts)


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> None:
    source = tar.extractfile(member)
    assert source is not None  # a regular file
    path.parent.mkdir(parents=True, exist_ok=True)
    executable = member.mode & stat.S_IXUSR
    # O_NOFOLLOW: never through a link (none can be there: the archive holds none).
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "wb") as target:
        while chunk := source.read(1 << 20):
            target.write(chunk)
    path.chmod(0o555 if executable else 0o444)
