"""Packing a project folder into a code archive, as `trainjobs code push DIR` and `submit --code
DIR` do: a gzip'd tar of every regular file under DIR but those left out, built so that the same
files always give the same bytes (sorted, no times, no owners), hence the same id, and a folder
that did not change is never uploaded twice.

Left out: `.git/`, `__pycache__/`, `.venv/`, `.env` and `*.pyc`, and whatever `DIR/.trainjobsignore`
lists, in `.gitignore`'s syntax (read by pathspec)."""

from __future__ import annotations

import gzip
import hashlib
import os
import stat
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pathspec

from trainjobs.contract.archives import path_out_of_bounds
from trainjobs.contract.code import MAX_BYTES, MAX_FILES, code_id

LEFT_OUT = [".git/", "__pycache__/", ".venv/", ".env", "*.pyc"]
IGNORE_FILE = ".trainjobsignore"
LARGEST_NAMED = 5


class PackingRefused(ValueError):
    """The folder cannot be packed as it is (a link in it, say), or packs too large."""


@dataclass(frozen=True)
class Packed:
    path: Path  # the archive, in a temporary file (the caller removes it)
    sha256: str
    size_bytes: int
    files: int
    largest: list[tuple[str, int]]  # the biggest files packed: (path, bytes), biggest first

    @property
    def code(self) -> str:
        return code_id(self.sha256)


def pack(folder: Path) -> Packed:
    if not folder.is_dir():
        raise PackingRefused(f"{folder} is not a folder")
    members = _members(folder)
    handle, name = tempfile.mkstemp(prefix="trainjobs-code-", suffix=".tar.gz")
    os.close(handle)
    with (
        open(name, "wb") as raw,
        gzip.GzipFile(fileobj=raw, mode="wb", mtime=0, filename="") as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for relative, path in members:
            with open(path, "rb") as content:
                tar.addfile(_entry(relative, path), content)
    largest = sorted(((relative, path.stat().st_size) for relative, path in members), key=lambda m: -m[1])
    digest = hashlib.sha256()
    with open(name, "rb") as packed:
        for block in iter(lambda: packed.read(1 << 20), b""):
            digest.update(block)
    return Packed(Path(name), digest.hexdigest(), Path(name).stat().st_size, len(members), largest[:LARGEST_NAMED])


def too_large(packed: Packed, max_bytes: int = MAX_BYTES) -> str | None:
    """Why the archive cannot be uploaded (None: it can), naming the biggest files."""
    if packed.size_bytes <= max_bytes:
        return None
    return (
        f"the archive is {packed.size_bytes:,} bytes, over the limit of {max_bytes:,}; "
        f"the biggest files: {biggest_files(packed)}"
    )


def biggest_files(packed: Packed) -> str:
    named = ", ".join(f"{path} ({size:,} bytes)" for path, size in packed.largest)
    return f"{named} (leave them out in {IGNORE_FILE})"


def _members(folder: Path) -> list[tuple[str, Path]]:
    ignored = LEFT_OUT + _ignore_lines(folder / IGNORE_FILE)
    spec = pathspec.GitIgnoreSpec.from_lines(ignored)
    members = []
    for root, folders, files in os.walk(folder):
        base = Path(root)
        folders[:] = sorted(name for name in folders if not spec.match_file(_relative(base / name, folder) + "/"))
        for name in folders:  # os.walk lists a link to a folder but does not enter it: say so
            if (base / name).is_symlink():
                raise PackingRefused(f"{_relative(base / name, folder)} is a link: leave it out in {IGNORE_FILE}")
        for name in sorted(files):
            path = base / name
            relative = _relative(path, folder)
            if spec.match_file(relative):
                continue
            mode = path.lstat().st_mode
            if stat.S_ISLNK(mode) or not stat.S_ISREG(mode):
                raise PackingRefused(f"{relative} is a link or not a regular file: leave it out in {IGNORE_FILE}")
            if why := path_out_of_bounds(relative):
                raise PackingRefused(f"{relative[:80]}: {why}: leave it out in {IGNORE_FILE}")
            members.append((relative, path))
            if len(members) > MAX_FILES:
                raise PackingRefused(f"more than {MAX_FILES:,} files: leave some out in {IGNORE_FILE}")
    return members


def _ignore_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []


def _relative(path: Path, folder: Path) -> str:
    return path.relative_to(folder).as_posix()


def _entry(relative: str, path: Path) -> tarfile.TarInfo:
    info = tarfile.TarInfo(relative)
    info.size = path.stat().st_size
    info.mode = 0o755 if path.stat().st_mode & stat.S_IXUSR else 0o644
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = ""
    return info
