"""A job's own code: the archive a user uploads (a gzip'd tar of their project), how it is named,
where it is kept, and how a spec names a model or dataset inside it."""

from __future__ import annotations

import hashlib
import re
from datetime import datetime
from pathlib import Path

from pydantic import BaseModel

CODE_ID = re.compile(r"sha256:[0-9a-f]{64}")  # an archive is named by the sha256 of its bytes
# A model or dataset entry inside the archive: "package.module:attribute".
ENTRY_REFERENCE = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*:[A-Za-z_]\w*")

MAX_BYTES = 100 * 2**20  # TRAINJOBS_CODE_MAX_BYTES: the archive as uploaded
MAX_UNPACKED_BYTES = 2**30  # TRAINJOBS_CODE_MAX_UNPACKED_BYTES: its files together
MAX_FILES = 100_000  # members of one archive: its files and its folders together
MAX_PATH_BYTES = 1024  # one member's path under the archive's root, UTF-8
MAX_PATH_DEPTH = 64  # folders above one member
MAX_NAME_BYTES = 255  # one part of a path (the kernel's NAME_MAX)
# Extended headers (PAX records, GNU long names) are read into memory whole: each is bounded,
# and so are all of one archive's together, so that no upload can make its check use memory.
MAX_HEADER_BYTES = 64 * 2**10
MAX_HEADERS_BYTES = 8 * 2**20
REQUIREMENTS = "requirements.txt"  # at the archive's root: installed into the job's environment


class CodeArchive(BaseModel):
    """What `POST /v1/code` and `GET /v1/code/{id}` answer."""

    id: str
    size_bytes: int
    files: int
    created_at: datetime


class CodeLimits(BaseModel):
    """What `GET /v1/code/limits` answers: this API's bounds on an archive, so that a client
    refuses one over them before it uploads anything, naming the biggest files."""

    max_bytes: int  # TRAINJOBS_CODE_MAX_BYTES
    max_unpacked_bytes: int  # TRAINJOBS_CODE_MAX_UNPACKED_BYTES


def code_id(sha256_hex: str) -> str:
    return f"sha256:{sha256_hex}"


def digest_of(code: str) -> str:
    """The hex digest a code id names."""
    if not CODE_ID.fullmatch(code):
        raise ValueError(f"{code!r} is not a code archive id (sha256:<64 hex digits>)")
    return code.removeprefix("sha256:")


def stored_path(code: str) -> str:
    """Where the archive lives, relative to the checkpoint store. Content-addressed: the same
    bytes are kept once, whoever uploaded them."""
    return f"code/{digest_of(code)}.tar.gz"


def is_entry_reference(name: str) -> bool:
    return ENTRY_REFERENCE.fullmatch(name) is not None


def sha256_of_file(path: Path) -> str:
    """The hex sha256 of a file, read in blocks (an archive, a checkpoint: files may be big)."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
