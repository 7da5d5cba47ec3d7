"""Code archives for tests and benchmarks: well-formed ones from a dict of files, hostile ones
with one bad member, and a tiny wheel to ship inside one (built here: nothing is downloaded)."""

from __future__ import annotations

import base64
import hashlib
import io
import tarfile
import zipfile
import zlib
from pathlib import Path

EXAMPLE_PROJECT = Path(__file__).resolve().parent.parent / "examples" / "own-model"
OWN_TASK_PROJECT = EXAMPLE_PROJECT.parent / "own-task"


def archive_of(files: dict[str, bytes | str], extra: list[tarfile.TarInfo] | None = None) -> bytes:
    """A gzip'd tar of `files` (path → content), then the `extra` members as given (links,
    devices, odd names: what the checks must refuse)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in files.items():
            data = content.encode() if isinstance(content, str) else content
            member = tarfile.TarInfo(name)
            member.size = len(data)
            member.mode = 0o644
            tar.addfile(member, io.BytesIO(data))
        for member in extra or []:
            tar.addfile(member, io.BytesIO(b"x" * member.size) if member.isfile() else None)
    return buffer.getvalue()


def member(name: str, kind: bytes = tarfile.REGTYPE, size: int = 0, linkname: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.size = size
    info.linkname = linkname
    return info


def header_bomb(header_bytes: int) -> bytes:
    """A gzip'd tar whose first member is a PAX extended header of `header_bytes` (zeros: a few
    kilobytes once compressed), then one small file. Written block by block, so that making it
    costs no memory: what an unbounded check reads whole."""
    header = tarfile.TarInfo("././@PaxHeader")
    header.type = tarfile.XHDTYPE
    header.size = header_bytes
    padded = -header_bytes % tarfile.BLOCKSIZE
    compressor = zlib.compressobj(wbits=31)  # gzip framing
    out = [compressor.compress(header.tobuf(format=tarfile.USTAR_FORMAT))]
    zeros = bytes(1 << 20)
    for start in range(0, header_bytes + padded, len(zeros)):
        out.append(compressor.compress(zeros[: min(len(zeros), header_bytes + padded - start)]))
    after = io.BytesIO()
    with tarfile.open(fileobj=after, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        tar.addfile(member("model.py", size=1), io.BytesIO(b"x"))
    out.append(compressor.compress(after.getvalue()))
    out.append(compressor.flush())
    return b"".join(out)


def example_files() -> dict[str, bytes | str]:
    """examples/own-model's package, as files of an archive."""
    return {
        str(path.relative_to(EXAMPLE_PROJECT)): path.read_bytes()
        for path in sorted((EXAMPLE_PROJECT / "wavesort").glob("*.py"))
    }


def wheel(name: str, version: str, module_source: str) -> tuple[str, bytes]:
    """A pure-Python wheel holding one module `name` ("<file name>", bytes): the same bytes for
    the same arguments (its members carry a fixed date), as a wheel rebuilt reproducibly would."""
    dist_info = f"{name}-{version}.dist-info"
    files = {
        f"{name}.py": module_source.encode(),
        f"{dist_info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
        f"{dist_info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: devstack\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = [f"{path},sha256={_urlsafe_digest(data)},{len(data)}" for path, data in files.items()]
    files[f"{dist_info}/RECORD"] = ("\n".join([*record, f"{dist_info}/RECORD,,"]) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for path, data in files.items():
            archive.writestr(zipfile.ZipInfo(path, date_time=(2020, 1, 1, 0, 0, 0)), data)
    return f"{name}-{version}-py3-none-any.whl", buffer.getvalue()


def _urlsafe_digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
