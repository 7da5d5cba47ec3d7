"""A team's own model, as a code archive: packed and uploaded by the CLI, trained by a real worker
in its real sandbox with every technique of the trainer, with its requirements installed once."""

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from devstack import EXAMPLE_PROJECT, archive_of, example_files, wait_for_terminal, wait_until, wheel
from trainjobs.worker.sandbox import unavailable_because

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(unavailable_because() is not None, reason=f"no sandbox: {unavailable_because()}"),
]

TRAINJOBS = str(Path(sys.executable).parent / "trainjobs")
SPEC = EXAMPLE_PROJECT / "spec.yaml"
GZIP = {"Content-Type": "application/gzip"}


def trainjobs(stack, token, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRAINJOBS_URL=stack.url, TRAINJOBS_TOKEN=token)
    return subprocess.run([TRAINJOBS, *args], capture_output=True, text=True, env=env, timeout=300)


def code_uploads(stack) -> int:
    return stack.log_text("api").count('"POST /v1/code HTTP/1.1" 201')


def upload(client, archive: bytes) -> str:
    response = client.post("/v1/code", content=archive, headers=GZIP)
    assert response.status_code in (200, 201), response.text
    return response.json()["id"]


def wavesort_spec(**overrides) -> dict:
    spec = {
        "model": {"name": "wavesort.catalog:CLASSIFIER", "params": {"channels": 8, "layers": 2}},
        "data": {"name": "wavesort.catalog:WAVES", "params": {"num_samples": 256, "length": 64}},
        "device": "cpu",
        "gpus": 2,
        "epochs": 2,
        "batch_size": 8,
        "optimizer": {"name": "adamw", "lr": 0.003},
    }
    return {**spec, **overrides}


def test_the_example_trains_through_submit_code_and_its_checkpoint_loads_into_its_class(stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    token = stack.token()
    submitted = trainjobs(stack, token, "submit", str(SPEC), "--code", str(EXAMPLE_PROJECT), "--watch")
    assert submitted.returncode == 0, submitted.stderr + submitted.stdout
    assert "uploaded" in submitted.stderr and code_uploads(stack) == 1
    client = stack.client(token)
    job = client.get("/v1/jobs").json()["items"][0]
    assert (job["state"], job["epoch"]) == ("succeeded", 4), job["error"]
    assert job["spec"]["model"]["params"] == {"channels": 16, "layers": 3}  # a code entry's are checked on the worker

    last = client.get(f"/v1/jobs/{job['id']}/checkpoints").json()["items"][-1]
    state = torch.load(
        io.BytesIO(client.get(f"/v1/jobs/{job['id']}/checkpoints/{last['id']}").content), weights_only=True
    )
    sys.path.insert(0, str(EXAMPLE_PROJECT))
    try:
        from wavesort.build import WaveClassifier

        WaveClassifier(channels=16, layers=3, num_classes=4).load_state_dict(state["model"], strict=True)
    finally:
        sys.path.remove(str(EXAMPLE_PROJECT))

    again = trainjobs(stack, token, "code", "push", str(EXAMPLE_PROJECT))
    assert again.returncode == 0 and "nothing uploaded" in again.stderr
    assert again.stdout.strip() == job["spec"]["code"]
    assert code_uploads(stack) == 1  # an unchanged folder is not sent again


def test_a_folder_over_the_limit_uploads_nothing_and_names_its_largest_files(stack_on, sqlite_url, tmp_path):
    stack = stack_on(sqlite_url)
    project = tmp_path / "project"
    (project / "weights").mkdir(parents=True)
    (project / "model.py").write_text("x = 1\n")
    (project / "weights" / "big.bin").write_bytes(os.urandom(50_000))
    (project / ".git").mkdir()
    (project / ".git" / "pack.bin").write_bytes(os.urandom(500_000))  # left out: never counted
    refused = trainjobs(stack, stack.token(), "code", "push", str(project), "--max-bytes", "20000")
    assert refused.returncode != 0
    assert "weights/big.bin" in refused.stderr and ".git" not in refused.stderr
    assert code_uploads(stack) == 0


def test_a_folder_over_the_api_s_own_limit_uploads_nothing_and_names_its_five_largest_files(
    stack_on, sqlite_url, tmp_path
):
    stack = stack_on(sqlite_url, TRAINJOBS_CODE_MAX_BYTES="30000")  # the CLI is not told: it asks
    project = tmp_path / "project"
    project.mkdir()
    for index in range(7):  # random bytes: gzip keeps them as large
        (project / f"part{index}.bin").write_bytes(os.urandom(6_000 + 1_000 * index))
    for command in (["code", "push", str(project)], ["submit", str(SPEC), "--code", str(project)]):
        refused = trainjobs(stack, stack.token(), *command)
        assert refused.returncode != 0 and "nothing uploaded" in refused.stderr, refused.stderr
        assert "over the limit of 30,000" in refused.stderr, refused.stderr
        named = [f"part{index}.bin" for index in range(7) if f"part{index}.bin" in refused.stderr]
        assert named == [f"part{index}.bin" for index in range(2, 7)], refused.stderr  # the five largest
    assert code_uploads(stack) == 0
    assert stack.client(stack.token()).get("/v1/code/limits").json() == {
        "max_bytes": 30000,
        "max_unpacked_bytes": 2**30,
    }


def test_a_code_job_learns_exactly_as_the_same_model_installed_as_a_plugin(example_installed, stack_on, sqlite_url):
    """2 ranks, bf16, accumulation 4: the archive's model and the installed one give the same
    losses, epoch by epoch (same seed, same sandbox)."""
    stack = stack_on(sqlite_url)
    client = stack.client(stack.token())
    code = upload(client, archive_of(example_files()))
    common = {"precision": "bf16", "accumulation_steps": 4, "epochs": 3, "seed": 7}
    own = client.post("/v1/jobs", json=wavesort_spec(code=code, **common)).json()
    plugin_spec = wavesort_spec(**common)
    plugin_spec["model"] = {**plugin_spec["model"], "name": "wave-classifier"}
    plugin_spec["data"] = {**plugin_spec["data"], "name": "waves"}
    plugin = client.post("/v1/jobs", json=plugin_spec).json()
    for job in (own, plugin):
        finished = wait_for_terminal(client, job["id"])
        assert finished["state"] == "succeeded", finished["error"]
    losses = [
        [(row["train_loss"], row["val_loss"]) for row in client.get(f"/v1/jobs/{job['id']}/metrics").json()["items"]]
        for job in (own, plugin)
    ]
    assert len(losses[0]) == len(losses[1]) == 3
    for (own_train, own_val), (plugin_train, plugin_val) in zip(*losses, strict=True):
        assert abs(own_train - plugin_train) <= 1e-6 and abs(own_val - plugin_val) <= 1e-6


def _archive_with_requirements(requirement: str) -> bytes:
    name, wheel_bytes = wheel("tjextra", "1.0", "ANSWER = 42\n")
    uses_it = "import tjextra\n\nassert tjextra.ANSWER == 42\nfrom wavesort.catalog import CLASSIFIER  # noqa: E402\n"
    return archive_of(
        {
            **example_files(),
            "extra_model.py": uses_it,
            f"wheels/{name}": wheel_bytes,
            "requirements.txt": requirement,
        }
    )


def test_requirements_install_once_and_a_bad_one_fails_the_job_naming_it(stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    client = stack.client(stack.token())
    code = upload(client, _archive_with_requirements("./wheels/tjextra-1.0-py3-none-any.whl\n"))
    spec = wavesort_spec(code=code, model={"name": "extra_model:CLASSIFIER", "params": {"channels": 4}})
    logs = []
    for _ in range(2):
        job = client.post("/v1/jobs", json=spec).json()
        finished = wait_for_terminal(client, job["id"])
        assert finished["state"] == "succeeded", finished["error"]
        logs.append(client.get(f"/v1/jobs/{job['id']}/logs").text)
    assert "Successfully installed tjextra-1.0" in logs[0]
    assert "installing requirements.txt" not in logs[1]  # the second job installed nothing
    worker_log = stack.log_text("worker")
    digest = code.removeprefix("sha256:")
    assert worker_log.count(f"code archive sha256:{digest} downloaded") == 1  # and downloaded nothing

    bad = upload(client, _archive_with_requirements("./wheels/tjmissing-2.0-py3-none-any.whl\n"))
    job = client.post("/v1/jobs", json={**spec, "code": bad}).json()
    failed = wait_for_terminal(client, job["id"])
    assert (failed["state"], failed["stop_reason"], failed["attempt"]) == ("failed", "error", 1)
    assert "tjmissing-2.0-py3-none-any.whl" in failed["error"]
    assert "tjmissing" in client.get(f"/v1/jobs/{job['id']}/logs").text  # pip's own words


def test_a_bad_param_of_a_code_model_fails_the_job_naming_it(stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    client = stack.client(stack.token())
    code = upload(client, archive_of(example_files()))
    spec = wavesort_spec(code=code, model={"name": "wavesort.catalog:CLASSIFIER", "params": {"layers": 99}})
    failed = wait_for_terminal(client, client.post("/v1/jobs", json=spec).json()["id"])
    assert (failed["state"], failed["attempt"]) == ("failed", 1)
    assert "model.params.layers" in failed["error"]


def test_without_a_sandbox_a_code_job_waits_saying_why(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, TRAINJOBS_SANDBOX="off")
    client = stack.client(stack.token())
    code = upload(client, archive_of(example_files()))
    job = client.post("/v1/jobs", json=wavesort_spec(code=code)).json()

    def waiting_for_a_sandbox():  # (before the worker's first heartbeat, the reason is that there is none)
        seen = client.get(f"/v1/jobs/{job['id']}").json()
        return seen if "sandbox" in (seen["waiting_reason"] or "") else None

    waiting = wait_until(waiting_for_a_sandbox, 30, what="a waiting reason naming the sandbox")
    assert waiting["state"] == "queued"
    built_in = client.post("/v1/jobs", json=wavesort_spec() | {"model": {"name": "mlp"}, "data": {"name": "digits"}})
    ended = wait_for_terminal(client, built_in.json()["id"])
    assert ended["state"] == "succeeded", ended["error"]
    assert client.get(f"/v1/jobs/{job['id']}").json()["state"] == "queued"


def test_an_objective_a_code_model_does_not_report_fails_its_job_naming_the_figures_it_does(stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    client = stack.client(stack.token())
    code = upload(client, archive_of(example_files()))
    spec = wavesort_spec(code=code, epochs=1, objective={"metric": "val_f1", "mode": "max"})
    failed = wait_for_terminal(client, client.post("/v1/jobs", json=spec).json()["id"])
    assert (failed["state"], failed["attempt"]) == ("failed", 1)
    assert "objective.metric 'val_f1'" in failed["error"] and "'val_accuracy'" in failed["error"], failed["error"]
