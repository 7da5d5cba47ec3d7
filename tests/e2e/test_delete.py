"""Deleting a finished job through a real stack whose checkpoints live in an S3-compatible store
(moto's server): its objects go, a job already running from one of its checkpoints finishes
unharmed, and the deleted checkpoint is refused to later jobs."""

from __future__ import annotations

import secrets

import pytest

from devstack import HALF_SECOND_EPOCHS, tiny_wavenet_spec, wait_for_terminal, wait_until

pytestmark = pytest.mark.e2e


def test_a_job_running_from_a_deleted_job_s_checkpoint_finishes_and_the_checkpoint_is_refused_after(
    stack_on, sqlite_url, s3_server
):
    prefix = secrets.token_hex(4)
    stack = stack_on(sqlite_url, **s3_server.env, TRAINJOBS_CHECKPOINT_DIR=f"s3://{s3_server.bucket}/{prefix}")
    client = stack.client(stack.token())
    first = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=2)).json()["id"]
    assert wait_for_terminal(client, first)["state"] == "succeeded"
    last = client.get(f"/v1/jobs/{first}/checkpoints").json()["items"][-1]
    assert any(key.startswith(f"{prefix}/{first}/") for key in s3_server.objects(prefix))

    spec = tiny_wavenet_spec(epochs=8, data=HALF_SECOND_EPOCHS, resume_from=last["id"])
    second = client.post("/v1/jobs", json=spec).json()["id"]
    wait_until(lambda: client.get(f"/v1/jobs/{second}").json()["epoch"] >= 3, 120, what="an epoch after the resume")

    assert client.delete(f"/v1/jobs/{first}").status_code == 204
    assert not any(key.startswith(f"{prefix}/{first}/") for key in s3_server.objects(prefix))
    assert client.get(f"/v1/jobs/{first}").status_code == 404

    finished = wait_for_terminal(client, second)
    assert (finished["state"], finished["stop_reason"]) == ("succeeded", "completed"), finished
    epochs = [row["epoch"] for row in client.get(f"/v1/jobs/{second}/metrics").json()["items"]]
    assert epochs == list(range(3, 9))  # continued after the deleted job's epoch 2
    own = client.get(f"/v1/jobs/{second}/checkpoints").json()["items"]
    assert own and all(client.get(f"/v1/jobs/{second}/checkpoints/{row['id']}").status_code == 200 for row in own)

    refused = client.post("/v1/jobs", json=tiny_wavenet_spec(resume_from=last["id"]))
    assert refused.status_code == 422 and "resume_from" in refused.text
