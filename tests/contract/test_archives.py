"""A code archive is checked member by member: what a job may ship, and every kind of member
that could reach outside the folder it is unpacked in, or fill the disk, is refused by name."""

import io
import stat
import tarfile

import pytest

from devstack import archive_of, member
from trainjobs.contract.archives import UnsafeArchive, scan, unpack

LIMIT = 10_000


@pytest.mark.parametrize(
    ("bad", "named", "why"),
    [
        (member("/etc/cron.d/x", size=1), "/etc/cron.d/x", "absolute path"),
        (member("pkg/../../escape.py", size=1), "pkg/../../escape.py", "'..'"),
        (member("pkg/link", tarfile.SYMTYPE, linkname="/etc/passwd"), "pkg/link", "link"),
        (member("pkg/hard", tarfile.LNKTYPE, linkname="pkg/model.py"), "pkg/hard", "link"),
        (member("pkg/null", tarfile.CHRTYPE), "pkg/null", "device"),
        (member("pkg/fifo", tarfile.FIFOTYPE), "pkg/fifo", "fifo"),
        (member("pkg/huge.bin", size=LIMIT), "pkg/huge.bin", "unpacked"),
    ],
)
def test_each_unsafe_member_is_refused_by_name(bad, named, why):
    archive = archive_of({"pkg/model.py": "x = 1\n"}, extra=[bad])
    with pytest.raises(UnsafeArchive) as refused:
        scan(io.BytesIO(archive), LIMIT)
    assert refused.value.member == named
    assert why in refused.value.reason


def test_a_zip_bomb_is_refused_once_its_files_pass_the_bound_unpacked():
    """A few kilobytes that inflate past the bound: refused on the member that crosses it, without
    writing the rest."""
    zeros = b"\0" * (4 * LIMIT)
    archive = archive_of({"pkg/a.bin": zeros[: LIMIT // 2], "pkg/bomb.bin": zeros})
    assert len(archive) < LIMIT // 4
    with pytest.raises(UnsafeArchive) as refused:
        scan(io.BytesIO(archive), LIMIT)
    assert refused.value.member == "pkg/bomb.bin"


def test_bytes_that_are_not_a_gzipped_tar_are_refused():
    with pytest.raises(UnsafeArchive, match="not a gzip'd tar"):
        scan(io.BytesIO(b"PK\x03\x04 a zip, say"), LIMIT)


def test_unpacking_writes_read_only_files_in_folders_closed_for_writing(tmp_path):
    archive = archive_of({"pkg/model.py": "x = 1\n", "pkg/deep/er/data.txt": "hi", "run.sh": "#!/bin/sh\n"})
    target = tmp_path / "unpacked"
    target.mkdir()
    summary = unpack(io.BytesIO(archive), target, LIMIT)
    assert (summary.files, summary.unpacked_bytes) == (3, 6 + 2 + 10)
    assert (target / "pkg/deep/er/data.txt").read_text() == "hi"
    for path in target.rglob("*"):
        mode = stat.S_IMODE(path.stat().st_mode)
        assert mode & 0o222 == 0, f"{path} is writable ({oct(mode)})"
        assert mode & 0o004, f"{path} is not readable by all ({oct(mode)})"


def test_unpacking_an_unsafe_archive_writes_nothing_outside_its_folder(tmp_path):
    target = tmp_path / "unpacked"
    target.mkdir()
    archive = archive_of({"ok.py": "x = 1\n"}, extra=[member("../outside.py", size=3)])
    with pytest.raises(UnsafeArchive):
        unpack(io.BytesIO(archive), target, LIMIT)
    assert not (tmp_path / "outside.py").exists()
