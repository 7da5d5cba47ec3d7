"""Packing a project folder: what is left out, that the same files give the same archive (and so
the same id), and that an archive over the limit names the files that made it so."""

import random
import tarfile

import pytest

from trainjobs.client.packing import PackingRefused, pack, too_large


def _project(root, files: dict[str, str | bytes]):
    for name, content in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(content if isinstance(content, bytes) else content.encode())
    return root


def _names(packed) -> list[str]:
    with tarfile.open(packed.path) as tar:
        return tar.getnames()


def test_version_control_caches_secrets_and_ignored_files_are_left_out(tmp_path):
    project = _project(
        tmp_path,
        {
            "pkg/model.py": "x = 1\n",
            "pkg/__pycache__/model.cpython-311.pyc": b"\0",
            "pkg/old.pyc": b"\0",
            ".git/config": "[core]\n",
            ".venv/bin/python": "",
            ".env": "SECRET=1\n",
            "notebooks/scratch.ipynb": "{}",
            "data/big.bin": b"\0" * 10,
            "data/keep.txt": "kept",
            ".trainjobsignore": "notebooks/\ndata/*.bin\n",
        },
    )
    packed = pack(project)
    try:
        assert sorted(_names(packed)) == [".trainjobsignore", "data/keep.txt", "pkg/model.py"]
        assert packed.files == 3
    finally:
        packed.path.unlink()


def test_the_same_files_pack_to_the_same_id_whatever_their_times(tmp_path):
    import os

    project = _project(tmp_path, {"pkg/model.py": "x = 1\n", "pkg/data.py": "y = 2\n"})
    first = pack(project)
    os.utime(project / "pkg/model.py", (0, 0))
    second = pack(project)
    (project / "pkg/model.py").write_text("x = 2\n")
    changed = pack(project)
    for packed in (first, second, changed):
        packed.path.unlink()
    assert first.code == second.code
    assert changed.code != first.code


def test_an_archive_over_the_limit_names_its_five_largest_files(tmp_path):
    sizes = {f"weights/w{index}.bin": 1000 * (index + 1) for index in range(7)}
    project = _project(tmp_path, {name: random.randbytes(size) for name, size in sizes.items()})  # incompressible
    packed = pack(project)
    packed.path.unlink()
    refused = too_large(packed, max_bytes=1000)
    assert refused is not None
    named = [name for name in sizes if name in refused]
    assert named == [f"weights/w{index}.bin" for index in (2, 3, 4, 5, 6)]
    assert refused.index("w6.bin") < refused.index("w2.bin")
    assert too_large(packed, max_bytes=packed.size_bytes) is None


def test_a_link_in_the_project_is_refused_rather_than_followed(tmp_path):
    project = _project(tmp_path / "project", {"pkg/model.py": "x = 1\n"})
    (project / "pkg" / "secrets").symlink_to("/etc")
    with pytest.raises(PackingRefused, match="pkg/secrets is a link"):
        pack(project)


def test_a_file_deeper_than_the_api_takes_is_refused_before_packing(tmp_path):
    project = _project(tmp_path / "project", {"pkg/model.py": "x = 1\n", "d/" * 65 + "deep.txt": "x"})
    with pytest.raises(PackingRefused, match="deeper than 64 folders: leave it out in .trainjobsignore"):
        pack(project)
