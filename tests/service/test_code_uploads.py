"""POST /v1/code, GET and DELETE /v1/code/{id} on the real app, SQL and store: an archive is
checked whole before anything is kept, stored once under its sha256, seen by its owner alone,
and named by a job's spec only if its owner uploaded it."""

import hashlib
import os
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from devstack import archive_of, header_bomb, member, tiny_wavenet_spec
from trainjobs.contract.code import code_id, stored_path
from trainjobs.service.api.app import create_app
from trainjobs.settings import Settings

GZIP = {"Content-Type": "application/gzip"}


def upload(api, headers, archive: bytes):
    return api.post("/v1/code", content=archive, headers={**headers, **GZIP})


def stored_files(settings: Settings) -> list[str]:
    root = settings.home / "checkpoints" / "code"
    return sorted(path.name for path in root.glob("*")) if root.is_dir() else []


def test_an_upload_is_kept_once_under_its_sha256(api, alice, settings):
    archive = archive_of({"pkg/model.py": "x = 1\n", "pkg/data.py": "y = 2\n"})
    expected = code_id(hashlib.sha256(archive).hexdigest())
    first = upload(api, alice, archive)
    assert first.status_code == 201, first.text
    assert first.json()["id"] == expected
    assert (first.json()["size_bytes"], first.json()["files"]) == (len(archive), 2)
    again = upload(api, alice, archive)
    assert again.status_code == 200 and again.json() == first.json()
    assert stored_files(settings) == [stored_path(expected).removeprefix("code/")]
    assert api.get(f"/v1/code/{expected}", headers=alice).json() == first.json()


def test_an_archive_is_visible_to_its_owner_alone(api, alice, bob):
    code = upload(api, alice, archive_of({"pkg/model.py": "x = 1\n"})).json()["id"]
    assert api.get(f"/v1/code/{code}", headers=bob).status_code == 404
    assert api.delete(f"/v1/code/{code}", headers=bob).status_code == 404
    refused = api.post("/v1/jobs", json={**tiny_wavenet_spec(), "code": code}, headers=bob)
    assert refused.status_code == 422 and "code" in refused.text


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        (member("/abs/model.py", size=1), "/abs/model.py"),
        (member("pkg/../../up.py", size=1), "pkg/../../up.py"),
        (member("pkg/link", b"2", linkname="/etc/passwd"), "pkg/link"),
        (member("pkg/hard", b"1", linkname="pkg/model.py"), "pkg/hard"),
        (member("pkg/tty", b"3"), "pkg/tty"),
        (member("d/" * 1500, b"5"), "a path longer than 1024 bytes"),
        (member("d/" * 65 + "x.py", size=1), "deeper than 64 folders"),
    ],
)
def test_an_unsafe_archive_is_refused_naming_its_member_and_nothing_is_kept(api, alice, settings, bad, named):
    response = upload(api, alice, archive_of({"pkg/model.py": "x = 1\n"}, extra=[bad]))
    assert response.status_code == 422
    assert named in response.json()["detail"][0]["msg"]
    assert stored_files(settings) == []


def test_an_archive_of_one_huge_header_is_refused_without_reading_it(api, alice, settings):
    response = upload(api, alice, header_bomb(64 * 2**20))
    assert response.status_code == 422 and "an extended header of 67108864 bytes" in response.text
    assert stored_files(settings) == []


@contextmanager
def api_with(settings: Settings, **limits: int):
    with TestClient(create_app(settings.model_copy(update=limits))) as client:
        yield client


def test_a_zip_bomb_is_refused_past_the_unpacked_bound(alice, settings):
    bomb = archive_of({"pkg/bomb.bin": b"\0" * 1_000_000})
    assert len(bomb) < 10_000
    with api_with(settings, code_max_unpacked_bytes=100_000) as api:
        response = upload(api, alice, bomb)
    assert response.status_code == 422 and "pkg/bomb.bin" in response.text and "unpacked" in response.text
    assert stored_files(settings) == []


def test_an_upload_over_the_limit_is_refused_declared_or_streamed(alice, settings):
    archive = archive_of({"blob.bin": os.urandom(8192)})
    chunks = (archive[start : start + 1024] for start in range(0, len(archive), 1024))  # no Content-Length
    with api_with(settings, code_max_bytes=2048) as api:
        declared = upload(api, alice, archive)
        streamed = api.post("/v1/code", content=chunks, headers={**alice, **GZIP})
    for response in (declared, streamed):
        assert response.status_code == 413 and "TRAINJOBS_CODE_MAX_BYTES" in response.text
    assert stored_files(settings) == []


def test_bytes_that_are_not_an_archive_are_refused(api, alice, settings):
    response = upload(api, alice, b"not a tarball")
    assert response.status_code == 422 and "gzip" in response.text


def test_a_spec_may_name_entries_in_its_code_only_with_code_set(api, alice):
    code = upload(api, alice, archive_of({"pkg/model.py": "x = 1\n"})).json()["id"]
    own = {**tiny_wavenet_spec(), "model": {"name": "pkg.model:NET", "params": {"width": 3}}}
    without = api.post("/v1/jobs", json=own, headers=alice)
    assert without.status_code == 422 and "model.name" in without.text
    job = api.post("/v1/jobs", json={**own, "code": code}, headers=alice)
    assert job.status_code == 201, job.text
    assert job.json()["spec"]["model"] == {"name": "pkg.model:NET", "params": {"width": 3}}  # checked on the worker


def test_an_archive_a_waiting_job_names_cannot_be_deleted_until_the_job_ends(api, alice, settings):
    code = upload(api, alice, archive_of({"pkg/model.py": "x = 1\n"})).json()["id"]
    job = api.post("/v1/jobs", json={**tiny_wavenet_spec(), "code": code}, headers=alice).json()
    refused = api.delete(f"/v1/code/{code}", headers=alice)
    assert refused.status_code == 409 and job["id"] in refused.text
    api.post(f"/v1/jobs/{job['id']}/cancel", headers=alice)
    assert api.delete(f"/v1/code/{code}", headers=alice).status_code == 204
    assert api.get(f"/v1/code/{code}", headers=alice).status_code == 404
    assert stored_files(settings) == []


def test_bytes_two_owners_uploaded_stay_until_both_delete_them(api, alice, bob, settings):
    archive = archive_of({"pkg/model.py": "x = 1\n"})
    code = upload(api, alice, archive).json()["id"]
    assert upload(api, bob, archive).status_code == 201
    assert api.delete(f"/v1/code/{code}", headers=alice).status_code == 204
    assert len(stored_files(settings)) == 1
    assert api.delete(f"/v1/code/{code}", headers=bob).status_code == 204
    assert stored_files(settings) == []
