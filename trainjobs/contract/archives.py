"""What a code archive may hold, checked member by member before anything of it is kept: the API
checks an upload, and a worker checks the archive again as it unpacks it (it trusts nothing that
reached the store). Regular files and folders only, each under the archive's root: no absolute
path, no `..`, no link, no device, no sparse file; bounds on members (files and folders), bytes
unpacked, a path's length and depth, and the extended headers read into memory, so that neither
the API's check nor the worker's unpack grows with what an upload claims."""

from __future__ import annotations

import os
import posixpath
import stat
import tarfile
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from trainjobs.contract.code import (
    MAX_FILES,
    MAX_HEADER_BYTES,
    MAX_HEADERS_BYTES,
    MAX_NAME_BYTES,
    MAX_PATH_BYTES,
    MAX_PATH_DEPTH,
)

# Members tarfile reads whole into memory (their data is a header of the next member).
# tarfile inflates what it reads this much at a time, and zeros inflate 1,032-fold: a few MiB
# at most in memory at once (its default, 10 KiB, let a bomb's zeros take tens of MiB).
_READ_BYTES = 2048
MAX_CHAINED_HEADERS = 8  # a PAX header, a GNU long name and a long link name come to three
_EXTENDED_HEADERS = (
    tarfile.XHDTYPE,
    tarfile.XGLTYPE,
    tarfile.SOLARIS_XHDTYPE,
    tarfile.GNUTYPE_LONGNAME,
    tarfile.GNUTYPE_LONGLINK,
)


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


def scan(archive: IO[bytes], max_unpacked_bytes: int, max_members: int = MAX_FILES) -> ArchiveSummary:
    """Read the whole archive once, checking every member; nothing is written."""
    return _walk(archive, max_unpacked_bytes, max_members, destination=None)


def unpack(
    archive: IO[bytes], destination: Path, max_unpacked_bytes: int, max_members: int = MAX_FILES
) -> ArchiveSummary:
    """Check every member and write it under `destination` (which must exist and be empty):
    files read-only (executable where the archive says so), folders closed for writing after.
    An OSError writing (a full disk) is the host's, not the archive's: it is raised as it is."""
    return _walk(archive, max_unpacked_bytes, max_members, destination)


def _walk(archive: IO[bytes], max_unpacked_bytes: int, max_members: int, destination: Path | None) -> ArchiveSummary:
    members = files = unpacked = 0
    try:
        with tarfile.open(fileobj=archive, mode="r|gz", tarinfo=_bounded_headers(), bufsize=_READ_BYTES) as tar:
            for member in tar:
                name = checked_name(member)
                members += 1
                if members > max_members:
                    raise UnsafeArchive(member.name, f"more than {max_members} files and folders")
                if member.isdir():
                    if destination is not None:
                        _make_folder(member, destination / name)
                    continue
                files += 1
                unpacked += member.size
                if unpacked > max_unpacked_bytes:
                    raise UnsafeArchive(member.name, f"the files come to more than {max_unpacked_bytes} bytes unpacked")
                if destination is not None:
                    _write(tar, member, destination / name)
    except (tarfile.TarError, EOFError, zlib.error) as error:
        raise UnsafeArchive(None, f"not a gzip'd tar: {error}") from None
    if destination is not None:
        _close_folders(destination)
    return ArchiveSummary(files=files, unpacked_bytes=unpacked)


def _bounded_headers() -> type[tarfile.TarInfo]:
    """A TarInfo that refuses an extended header over its bound, or one past the archive's
    budget for them all, before tarfile reads it; and any sparse member (its map is read whole,
    and it unpacks to a size it does not store). `_proc_member` is tarfile's documented hook for
    subclasses; the `_proc_gnusparse_*` it calls for PAX sparse files are refused before they read."""
    read = chained = 0

    def refuse_sparse(_self: tarfile.TarInfo, member: tarfile.TarInfo, *_: object) -> None:
        raise UnsafeArchive(member.name, "a sparse file is not allowed")

    class BoundedTarInfo(tarfile.TarInfo):
        _proc_gnusparse_00 = _proc_gnusparse_01 = _proc_gnusparse_10 = refuse_sparse

        def _proc_member(self, tarfile_: tarfile.TarFile) -> tarfile.TarInfo:
            nonlocal read, chained
            if self.type == tarfile.GNUTYPE_SPARSE:
                raise UnsafeArchive(self.name, "a sparse file is not allowed")
            if self.type in _EXTENDED_HEADERS:
                # tarfile reads the member an extended header precedes by recursion: few in a row.
                chained += 1
                if chained > MAX_CHAINED_HEADERS:
                    raise UnsafeArchive(None, f"more than {MAX_CHAINED_HEADERS} extended headers before one member")
                if self.size > MAX_HEADER_BYTES:
                    raise UnsafeArchive(None, f"an extended header of {self.size} bytes (at most {MAX_HEADER_BYTES})")
                read += tarfile.BLOCKSIZE + self.size
                if read > MAX_HEADERS_BYTES:
                    raise UnsafeArchive(None, f"extended headers of more than {MAX_HEADERS_BYTES} bytes in all")
            member: tarfile.TarInfo = super()._proc_member(tarfile_)  # type: ignore[misc]
            chained = 0
            if member.sparse is not None:  # should tarfile read a sparse file some other way
                raise UnsafeArchive(member.name, "a sparse file is not allowed")
            return member

    return BoundedTarInfo


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
    path = posixpath.join(*parts)
    if why := path_out_of_bounds(path):
        raise UnsafeArchive(name if len(name) <= 80 else name[:80] + "…", why)
    return path


def path_out_of_bounds(path: str) -> str | None:
    """Why a member's path under the archive's root ("pkg/model.py") is too long or too deep;
    None where it is not. The client asks too, before it packs anything."""
    if len(path.encode()) > MAX_PATH_BYTES:
        return f"a path longer than {MAX_PATH_BYTES} bytes"
    parts = path.split("/")
    if len(parts) - 1 > MAX_PATH_DEPTH:
        return f"deeper than {MAX_PATH_DEPTH} folders"
    if any(len(part.encode()) > MAX_NAME_BYTES for part in parts):
        return f"a file or folder name longer than {MAX_NAME_BYTES} bytes"
    return None


def _make_folder(member: tarfile.TarInfo, path: Path) -> None:
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise UnsafeArchive(member.name, "a folder where the archive already holds a file") from None


def _write(tar: tarfile.TarFile, member: tarfile.TarInfo, path: Path) -> None:
    source = tar.extractfile(member)
    assert source is not None  # a regular file
    _make_folder(member, path.parent)
    if path.is_dir():
        raise UnsafeArchive(member.name, "a file where the archive already holds a folder")
    executable = member.mode & stat.S_IXUSR
    # O_NOFOLLOW: never through a link (none can be there: the archive holds none).
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(descriptor, "wb") as target:
        while chunk := source.read(1 << 20):
            target.write(chunk)
    path.chmod(0o555 if executable else 0o444)
