"""A model and a dataset from an installed plugin package (entry points) train through the service."""

import pytest

from devstack import plugin_spec, wait_for_terminal

pytestmark = pytest.mark.e2e


def test_a_plugin_model_and_dataset_are_listed_and_train(plugin_installed, stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    client = stack.client(stack.token("alice"))
    models = {entry["name"]: entry for entry in client.get("/v1/models").json()["items"]}
    datasets = {entry["name"]: entry for entry in client.get("/v1/datasets").json()["items"]}
    assert {"wavenet", "mlp", "resnet50", "logistic"} <= models.keys()
    assert {"synthetic-audio", "digits", "blobs"} <= datasets.keys()
    dims = next(param for param in datasets["blobs"]["params"] if param["name"] == "dims")
    assert (dims["type"], dims["default"]) == ("integer", 5)

    bad = client.post(
        "/v1/jobs", json=plugin_spec(model={"name": "logistic"}, data={"name": "blobs", "params": {"dims": 0}})
    )
    assert bad.status_code == 422 and "data.params.dims" in bad.text

    job_id = client.post("/v1/jobs", json=plugin_spec()).json()["id"]
    job = wait_for_terminal(client, job_id, timeout=120)
    assert job["state"] == "succeeded", job["error"]
    assert job["spec"]["model"]["params"] == {"in_features": 5, "num_classes": 3}
    metrics = client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]
    assert metrics[-1]["train_loss"] < metrics[0]["train_loss"]
