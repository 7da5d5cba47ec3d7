"""A code archive is checked member by member: what a job may ship, and every kind of member
that could reach outside the folder it is unpacked in, or fill the disk, is refused by name."""

import io
import stat
import tarfile
import tracemalloc

import pytest

from devstack import archive_of, header_bomb, member
from trainjobs.contract.archives import UnsafeArchive, scan, unpack
from trainjobs.contract.code import MAX_HEADER_BYTES, MAX_HEADERS_BYTES, MAX_PATH_DEPTH

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


def test_an_extended_header_over_its_bound_is_refused_before_it_is_read():
    """64 MiB of PAX header in a few kilobytes: tarfile would read it whole into memory (a 146 KB
    upload once made the API's check take 882 MiB); the check refuses it on its size alone."""
    bomb = header_bomb(64 * 2**20)
    assert len(bomb) < 2**20
    tracemalloc.start()
    try:
        with pytest.raises(UnsafeArchive, match="an extended header of 67108864 bytes"):
            scan(io.BytesIO(bomb), LIMIT)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 16 * 2**20, f"the check took {peak} bytes"


def test_extended_headers_are_bounded_all_together_and_in_a_row():
    many = [_with_pax(f"pkg/f{index}.py", "x" * 60_000) for index in range(MAX_HEADERS_BYTES // 60_000 + 1)]
    with pytest.raises(UnsafeArchive, match="extended headers of more than"):
        scan(io.BytesIO(archive_of({}, extra=many)), LIMIT)
    chain = io.BytesIO()
    with tarfile.open(fileobj=chain, mode="w:gz") as tar:
        global_header = tarfile.TarInfo("pax_global_header")
        global_header.type = tarfile.XGLTYPE
        for _ in range(2000):  # tarfile would recurse once for each of them
            tar.fileobj.write(global_header.tobuf(format=tarfile.USTAR_FORMAT))
        tar.addfile(member("model.py", size=1), io.BytesIO(b"x"))
    with pytest.raises(UnsafeArchive, match="more than 8 extended headers before one member"):
        scan(io.BytesIO(chain.getvalue()), LIMIT)


def test_a_long_gnu_name_over_the_header_bound_is_refused():
    long_name = member("a" * (MAX_HEADER_BYTES + 1), size=1)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(long_name, io.BytesIO(b"x"))
    with pytest.raises(UnsafeArchive, match="an extended header of"):
        scan(io.BytesIO(buffer.getvalue()), LIMIT)


def test_sparse_files_are_refused_gnu_and_pax_alike():
    gnu = member("pkg/holes.bin", tarfile.GNUTYPE_SPARSE, size=0)
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.GNU_FORMAT) as tar:
        tar.addfile(gnu)
    with pytest.raises(UnsafeArchive, match="sparse") as refused:
        scan(io.BytesIO(buffer.getvalue()), LIMIT)
    assert refused.value.member == "pkg/holes.bin"
    # PAX sparse 1.0: its map, read whole, would be the data's first lines
    pax = _with_pax("pkg/holes.bin", "", size=512)
    pax.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.realsize": str(2**40)}
    with pytest.raises(UnsafeArchive, match="sparse"):
        scan(io.BytesIO(archive_of({}, extra=[pax])), LIMIT)


def test_folders_count_towards_the_bound_on_members():
    folders = [member(f"pkg/d{index}", tarfile.DIRTYPE) for index in range(20)]
    with pytest.raises(UnsafeArchive, match="more than 10 files and folders") as refused:
        scan(io.BytesIO(archive_of({"pkg/model.py": "x = 1\n"}, extra=folders)), LIMIT, max_members=10)
    assert refused.value.member == "pkg/d9"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("d/" * (MAX_PATH_DEPTH + 1) + "model.py", f"deeper than {MAX_PATH_DEPTH} folders"),
        ("d/" * 1500, "a path longer than"),  # 1,500 nested folders once raised RecursionError on a worker
        ("pkg/" + "n" * 256 + ".py", "a file or folder name longer than 255 bytes"),
    ],
)
def test_paths_too_long_or_too_deep_are_refused(name, why):
    kind = tarfile.DIRTYPE if name.endswith("/") else tarfile.REGTYPE
    with pytest.raises(UnsafeArchive, match=why):
        scan(io.BytesIO(archive_of({}, extra=[member(name, kind)])), LIMIT)


def test_the_deepest_path_allowed_unpacks(tmp_path):
    name = "d/" * MAX_PATH_DEPTH + "model.py"
    target = tmp_path / "unpacked"
    target.mkdir()
    unpack(io.BytesIO(archive_of({name: "x = 1\n"})), target, LIMIT)
    assert (target / name).read_text() == "x = 1\n"


def test_a_file_and_a_folder_of_one_name_are_refused_on_unpack(tmp_path):
    target = tmp_path / "unpacked"
    target.mkdir()
    archive = archive_of({"pkg": "a file", "pkg/model.py": "x = 1\n"})
    with pytest.raises(UnsafeArchive, match="already holds a file") as refused:
        unpack(io.BytesIO(archive), target, LIMIT)
    assert refused.value.member == "pkg/model.py"


def _with_pax(name: str, comment: str, size: int = 1) -> tarfile.TarInfo:
    info = member(name, size=size)
    info.pax_headers = {"comment": comment}
    return info
