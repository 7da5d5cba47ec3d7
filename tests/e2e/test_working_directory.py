"""A worker runs its jobs the same whatever its working directory holds: nothing its launcher,
fork server or ranks import comes from there. A folder named `trainjobs` (a TRAINJOBS_HOME of
./trainjobs, beside an editable install) or `torch` in it shadowed the installed packages: every
rank died in the fork server with "No module named 'trainjobs.contract'"."""

from __future__ import annotations

import pytest

from devstack import tiny_wavenet_spec, wait_for_terminal

pytestmark = pytest.mark.e2e


@pytest.mark.parametrize("shadow", ["trainjobs", "torch"])
def test_a_worker_started_beside_a_folder_named_like_a_package_runs_its_job(shadow, stack_on, sqlite_url, tmp_path):
    place = tmp_path / "where-the-worker-starts"
    (place / shadow / "contract").mkdir(parents=True)  # a namespace package of that name, as a home folder is
    (place / shadow / "runs").mkdir()
    stack = stack_on(sqlite_url, with_worker=False)
    stack.start_worker("beside", cwd=place)
    client = stack.client(stack.token())

    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=1)).json()["id"]

    job = wait_for_terminal(client, job_id)
    assert job["state"] == "succeeded", job["error"]
