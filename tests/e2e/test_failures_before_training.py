"""A job whose ranks never reach their training fails saying why, in its error and in its logs,
through the real worker, launcher and sandbox (the fork server's import error and a leased GPU
without its node: tests/worker/test_launcher.py and tests/worker/test_gpu_nodes.py)."""

from __future__ import annotations

import os

import pytest

from devstack import archive_of, example_files, wait_for_terminal
from tests.e2e.test_own_code import upload, wavesort_spec
from trainjobs.worker.sandbox import unavailable_because

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(unavailable_because() is not None, reason=f"no sandbox: {unavailable_because()}"),
]

# What bubblewrap says on a host that gives it no namespaces (a container without SYS_ADMIN, a
# kernel with user namespaces off). This host can make them, so a bwrap first on the worker's PATH
# refuses as that one would; everything else is the real worker, launcher and fork server.
REFUSING_BWRAP = """#!/bin/sh
echo "bwrap: Creating new namespace failed: Operation not permitted" >&2
exit 1
"""


def test_a_sandbox_that_cannot_be_made_fails_the_job_naming_bubblewrap_s_reason(stack_on, sqlite_url, tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir()
    (tools / "bwrap").write_text(REFUSING_BWRAP)
    (tools / "bwrap").chmod(0o755)
    stack = stack_on(sqlite_url, with_worker=False)
    stack.start_worker(PATH=f"{tools}:{os.environ['PATH']}")
    client = stack.client(stack.token())
    spec = wavesort_spec() | {"model": {"name": "mlp"}, "data": {"name": "digits"}}
    failed = wait_for_terminal(client, client.post("/v1/jobs", json=spec).json()["id"])
    assert (failed["state"], failed["stop_reason"], failed["attempt"]) == ("failed", "error", 1), failed
    assert "sandbox could not be started" in failed["error"], failed["error"]
    assert failed["error"].endswith("bwrap: Creating new namespace failed: Operation not permitted"), failed["error"]
    assert "Creating new namespace failed" in client.get(f"/v1/jobs/{failed['id']}/logs").text


@pytest.mark.parametrize(
    "entry, named",
    [
        ("wavesort.catalog:NO_SUCH_MODEL", "NO_SUCH_MODEL"),  # the module is there, the attribute is not
        ("wavesort.no_such_module:CLASSIFIER", "wavesort.no_such_module"),
    ],
)
def test_a_code_entry_that_is_not_in_the_archive_fails_the_job_naming_it(stack_on, sqlite_url, entry, named):
    stack = stack_on(sqlite_url)
    client = stack.client(stack.token())
    code = upload(client, archive_of(example_files()))
    spec = wavesort_spec(code=code, model={"name": entry, "params": {"channels": 8, "layers": 2}})
    failed = wait_for_terminal(client, client.post("/v1/jobs", json=spec).json()["id"])
    assert (failed["state"], failed["stop_reason"], failed["attempt"]) == ("failed", "error", 1), failed
    assert failed["error"].startswith("rank "), failed["error"]
    assert named in failed["error"].splitlines()[-1], failed["error"]
    logs = client.get(f"/v1/jobs/{failed['id']}/logs").text
    assert "Traceback" in logs and named in logs, logs[-2000:]


def only_the_api_s_plugin(folder) -> str:
    """A plugin model ("api-only-mlp": the built-in MLP under another name) installed where only
    the process given this folder as PYTHONPATH finds it: an API upgraded before its workers."""
    folder.mkdir()
    (folder / "api_only_plugin.py").write_text(
        "from trainjobs.contract.builtins import MODELS\n\nMLP = MODELS['mlp']\n"
    )
    dist = folder / "api_only_plugin-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: api-only-plugin\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[trainjobs.models]\napi-only-mlp = api_only_plugin:MLP\n")
    return str(folder)


def test_a_model_the_api_has_and_the_worker_lacks_fails_the_job_before_any_claim(stack_on, sqlite_url, tmp_path):
    stack = stack_on(sqlite_url, with_worker=False, PYTHONPATH=only_the_api_s_plugin(tmp_path / "api-only"))
    stack.start_worker(PYTHONPATH=str(tmp_path / "nothing"))
    client = stack.client(stack.token())
    spec = wavesort_spec() | {"model": {"name": "api-only-mlp"}, "data": {"name": "digits"}}
    refused = wait_for_terminal(client, client.post("/v1/jobs", json=spec).json()["id"], timeout=60)
    assert (refused["state"], refused["stop_reason"], refused["started_at"]) == ("failed", "error", None), refused
    assert refused["error"].startswith(f"worker worker-{stack.namespace} cannot build this spec"), refused["error"]
    assert "unknown model 'api-only-mlp'" in refused["error"], refused["error"]
    # The worker goes on with the next job (before, it was held by the one it could not build).
    built_in = wait_for_terminal(
        client,
        client.post("/v1/jobs", json=wavesort_spec() | {"model": {"name": "mlp"}, "data": {"name": "digits"}}).json()[
            "id"
        ],
        timeout=120,
    )
    assert built_in["state"] == "succeeded", built_in["error"]
