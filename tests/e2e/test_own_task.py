"""examples/own-task through the real service: each example trains from its code archive with its
README's line, and its own figures reach the metrics API (JSON and CSV), the event stream, the
CLI's table and the checkpoints' objective."""

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from devstack import OWN_TASK_PROJECT, wait_for_terminal
from trainjobs.client import TrainJobsClient
from trainjobs.worker.sandbox import unavailable_because

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(unavailable_because() is not None, reason=f"no sandbox: {unavailable_because()}"),
]

TRAINJOBS = str(Path(sys.executable).parent / "trainjobs")
EXAMPLES = {"regression.yaml": ("mae", "val_mae"), "sequences.yaml": ("token_accuracy", "val_token_accuracy")}


def trainjobs(stack, token, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRAINJOBS_URL=stack.url, TRAINJOBS_TOKEN=token, COLUMNS="200")
    return subprocess.run([TRAINJOBS, *args], capture_output=True, text=True, env=env, timeout=300)


def test_both_examples_train_with_their_readme_line_and_report_their_own_figures_everywhere(stack_on, sqlite_url):
    readme = (OWN_TASK_PROJECT / "README.md").read_text()
    stack = stack_on(sqlite_url)
    token = stack.token()
    client = stack.client(token)
    for spec_file, (figure, objective) in EXAMPLES.items():
        line = f"trainjobs submit examples/own-task/{spec_file} --code examples/own-task --watch"
        assert line in readme
        submitted = trainjobs(stack, token, *line.split()[1:])
        assert submitted.returncode == 0, submitted.stderr + submitted.stdout
        job = client.get(f"/v1/jobs/{submitted.stdout.splitlines()[0]}").json()
        assert job["state"] == "succeeded", job["error"]

        items = client.get(f"/v1/jobs/{job['id']}/metrics").json()["items"]
        assert len(items) == job["epoch"] >= 2
        assert all(
            isinstance(row[f"train_{figure}"], float) and isinstance(row[f"val_{figure}"], float) for row in items
        )
        assert job["metrics"][objective] == items[-1][objective]

        table = trainjobs(stack, token, "metrics", job["id"]).stdout.splitlines()
        assert f"TRAIN_{figure.upper()}" in table[0].split() and f"VAL_{figure.upper()}" in table[0].split()
        assert len(table) == 1 + len(items)
        rows = list(csv.DictReader(io.StringIO(client.get(f"/v1/jobs/{job['id']}/metrics?format=csv").text)))
        assert [float(row[objective]) for row in rows] == [row[objective] for row in items]

        with TrainJobsClient(stack.url, token) as typed:  # the Python client's types carry them too
            streamed = [event.data for event in typed.events(job["id"]) if event.kind == "metrics"]
            assert [epoch.figures[objective] for epoch in typed.metrics(job["id"])] == [row[objective] for row in items]
        assert [row[objective] for row in streamed] == [row[objective] for row in items]

        checkpoints = client.get(f"/v1/jobs/{job['id']}/checkpoints").json()["items"]
        by_epoch = {row["epoch"]: row[objective] for row in items}
        assert checkpoints and all(row["objective"] == by_epoch[row["epoch"]] for row in checkpoints)


def test_a_loss_that_returns_an_undeclared_name_fails_its_job_once_naming_it(plugin_installed, stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    client = stack.client(stack.token())
    spec = {
        "model": {"name": "broken-loss", "params": {"mode": "undeclared"}},
        "data": {"name": "blobs", "params": {"num_samples": 80, "dims": 5, "classes": 3}},
        "device": "cpu",
        "gpus": 2,
        "epochs": 1,
        "batch_size": 8,
        "optimizer": {"name": "sgd", "lr": 0.1},
    }
    job_id = client.post("/v1/jobs", json=spec).json()["id"]
    job = wait_for_terminal(client, job_id)
    assert (job["state"], job["stop_reason"], job["attempt"]) == ("failed", "error", 1)  # not retried
    assert "trainjobs_example_plugin.tasks:broken_loss returned ['surprise']" in job["error"], job["error"]
