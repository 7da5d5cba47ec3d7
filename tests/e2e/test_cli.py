"""The `trainjobs` command through its real entry point, against a real stack."""

import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
import yaml

from devstack import tiny_wavenet_spec, wait_until

pytestmark = pytest.mark.e2e

# The console script the package installs, beside this interpreter.
TRAINJOBS = str(Path(sys.executable).parent / "trainjobs")


def trainjobs(stack, token, *args, timeout=240) -> subprocess.CompletedProcess:
    env = dict(os.environ, TRAINJOBS_URL=stack.url, TRAINJOBS_TOKEN=token)
    return subprocess.run([TRAINJOBS, *args], capture_output=True, text=True, env=env, timeout=timeout)


def test_submit_watch_shows_the_epochs_and_exits_0_then_1_for_a_failing_job(stack_on, sqlite_url, tmp_path):
    stack = stack_on(sqlite_url)
    token = stack.token("cli")
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(json.dumps(tiny_wavenet_spec(epochs=3)))  # JSON is YAML too

    done = trainjobs(stack, token, "submit", str(spec_file), "--watch")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    job_id = lines[0]
    assert job_id.startswith("j")
    for epoch in (1, 2, 3):
        assert any(f"epoch {epoch}/3" in line for line in lines), done.stdout
    assert "succeeded" in lines[-1] and "train" in lines[-1] and "samples/s" in lines[-1]

    table = trainjobs(stack, token, "metrics", job_id)
    assert table.returncode == 0 and len(table.stdout.splitlines()) == 4
    assert job_id in trainjobs(stack, token, "jobs").stdout
    logs = trainjobs(stack, token, "logs", job_id, "--tail", "1")
    assert logs.stdout.splitlines() == [
        "[rank 0] rank 0 done after epoch 3: completed",
        "[rank 1] rank 1 done after epoch 3: completed",
    ]

    failing = tmp_path / "failing.json"
    failing.write_text(json.dumps(tiny_wavenet_spec(optimizer={"name": "sgd", "lr": 1e30, "momentum": 0.0})))
    failed = trainjobs(stack, token, "submit", str(failing), "--watch")
    assert failed.returncode == 1
    assert "failed" in failed.stdout and "loss is not finite" in failed.stderr


def test_errors_are_one_readable_line(stack_on, sqlite_url, tmp_path):
    stack = stack_on(sqlite_url)
    token = stack.token("cli")
    missing = trainjobs(stack, token, "status", "j0000000000000000")
    assert missing.returncode == 2
    assert missing.stderr.strip() == "error: job j0000000000000000 not found (HTTP 404)"

    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(tiny_wavenet_spec(gpus=0)))
    refused = trainjobs(stack, token, "submit", str(bad))
    assert refused.returncode == 2 and len(refused.stderr.strip().splitlines()) == 1
    assert "gpus" in refused.stderr and "Traceback" not in refused.stderr

    unauthorised = trainjobs(stack, "tj_wrong", "jobs")
    assert unauthorised.returncode == 2 and unauthorised.stderr.strip() == "error: invalid or revoked token (HTTP 401)"

    unreachable = subprocess.run(
        [TRAINJOBS, "jobs", "--url", "http://127.0.0.1:9", "--token", token], capture_output=True, text=True, timeout=60
    )
    # Exit code 3: the API is away (not the request's fault), as Hardening asks of a watch that gives up.
    assert unreachable.returncode == 3 and unreachable.stderr.startswith("error: cannot reach")
    assert len(unreachable.stderr.strip().splitlines()) == 1


def test_tokens_are_listed_without_their_secret_and_a_revoked_one_is_refused(stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    env = dict(os.environ, TRAINJOBS_DATABASE_URL=sqlite_url, TRAINJOBS_HOME=str(stack.home))
    created = subprocess.run(
        [TRAINJOBS, "token", "create", "--owner", "mallory"], capture_output=True, text=True, env=env, check=True
    ).stdout.splitlines()[-1]
    assert stack.client(created).get("/v1/jobs").status_code == 200
    listing = subprocess.run([TRAINJOBS, "token", "list"], capture_output=True, text=True, env=env, check=True).stdout
    assert "mallory" in listing and created not in listing
    token_id = next(line.split()[0] for line in listing.splitlines() if "mallory" in line)
    revoked = subprocess.run([TRAINJOBS, "token", "revoke", token_id], capture_output=True, text=True, env=env)
    assert revoked.returncode == 0 and revoked.stdout.strip() == f"revoked {token_id}"
    # The API trusts a token it checked for TRAINJOBS_TOKEN_CACHE_SECONDS (5 by default).
    wait_until(lambda: stack.client(created).get("/v1/jobs").status_code == 401, 15, what="the token refused")


def test_logs_follow_prints_each_line_once_and_exits_when_the_job_ends(stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    token = stack.token("cli")
    client = stack.client(token)
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=4)).json()["id"]

    followed = trainjobs(stack, token, "logs", job_id, "-f")  # returns only once the job has ended
    assert followed.returncode == 0, followed.stderr
    assert client.get(f"/v1/jobs/{job_id}").json()["state"] == "succeeded"
    final = trainjobs(stack, token, "logs", job_id).stdout.splitlines()
    assert Counter(followed.stdout.splitlines()) == Counter(final)
    assert "[rank 1] rank 1 done after epoch 4: completed" in final


def test_watch_backs_off_while_the_api_is_down_and_gives_up_with_exit_code_3(stack_on, sqlite_url):
    stack = stack_on(sqlite_url)
    token = stack.token("cli")
    job_id = stack.client(token).post("/v1/jobs", json=tiny_wavenet_spec(epochs=10_000)).json()["id"]
    env = dict(os.environ, TRAINJOBS_URL=stack.url, TRAINJOBS_TOKEN=token)
    watch = subprocess.Popen(
        [TRAINJOBS, "watch", job_id, "--give-up-after", "6"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(3)  # connected and following
    stack.kill_api()
    started = time.monotonic()
    _pid, status, usage = os.wait4(watch.pid, 0)
    waited = time.monotonic() - started
    assert os.waitstatus_to_exitcode(status) == 3
    assert 1 <= waited <= 30, waited  # 6 s after its last answer, which came before the kill
    # Backing off, not spinning: a tight reconnect loop burns a core for the whole wait.
    assert usage.ru_utime + usage.ru_stime < 0.25 * waited + 1.5, (usage.ru_utime, usage.ru_stime, waited)
    assert "cannot reach" in watch.stderr.read()


def start_up(home: Path) -> tuple[subprocess.Popen, str, str]:
    """`trainjobs up` on `home`: its process, its URL once it answers, and the token it printed."""
    from devstack import REDIS_URL, free_port, wait_until

    port = free_port()
    env = dict(
        os.environ,
        TRAINJOBS_HOME=str(home),
        TRAINJOBS_REDIS_URL=REDIS_URL,
        TRAINJOBS_NAMESPACE=f"tjtest-up-{port}",
        PYTHONUNBUFFERED="1",
    )
    process = subprocess.Popen(
        [TRAINJOBS, "up", "--port", str(port), "--cpu-slots", "1"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    token = None
    while token is None:  # `up` prints its token once migrated (pytest-timeout bounds a hang)
        line = process.stdout.readline()
        assert line, "trainjobs up exited before printing its token"
        if line.startswith("token: "):
            token = line.split()[1]
    url = f"http://127.0.0.1:{port}"
    wait_until(lambda: _answers(url), 30, what="the API")
    return process, url, token


def stop_up(process: subprocess.Popen) -> None:
    os.killpg(process.pid, signal.SIGTERM)
    process.wait(timeout=30)


def test_each_start_of_up_revokes_the_token_the_previous_start_printed(tmp_path):
    first, url, first_token = start_up(tmp_path)
    stop_up(first)
    second, url, second_token = start_up(tmp_path)
    try:
        assert httpx.get(f"{url}/v1/jobs", headers={"Authorization": f"Bearer {second_token}"}).status_code == 200
        assert httpx.get(f"{url}/v1/jobs", headers={"Authorization": f"Bearer {first_token}"}).status_code == 401
    finally:
        stop_up(second)


def _answers(url: str) -> bool:
    try:
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


# ---- for scripts: --json, --all, filters, delete, exit codes -----------------------------------


def test_json_output_parses_and_matches_the_api(stack_on, sqlite_url, tmp_path):
    stack = stack_on(sqlite_url, with_worker=False)
    token = stack.token("cli")
    api = stack.client(token)
    spec_file = tmp_path / "job.yaml"
    spec_file.write_text(yaml.safe_dump(tiny_wavenet_spec(name="json-run", labels={"team": "speech"})))
    submitted = trainjobs(stack, token, "submit", str(spec_file), "--json")
    assert submitted.returncode == 0, submitted.stderr
    job = json.loads(submitted.stdout)
    # The leader's sweep soon explains why it waits (no worker here); nothing else changes.
    reason = wait_until(lambda: api.get(f"/v1/jobs/{job['id']}").json()["waiting_reason"], 30, what="a reason")
    assert {**job, "waiting_reason": reason} == api.get(f"/v1/jobs/{job['id']}").json()
    assert job["spec"]["labels"] == {"team": "speech"} and job["name"] == "json-run"

    status = trainjobs(stack, token, "status", job["id"], "--json")
    assert json.loads(status.stdout) == api.get(f"/v1/jobs/{job['id']}").json()
    listed = trainjobs(stack, token, "jobs", "--json", "--label", "team=speech")
    assert json.loads(listed.stdout) == api.get("/v1/jobs", params={"label": "team=speech"}).json()
    metrics = trainjobs(stack, token, "metrics", job["id"], "--json")
    assert json.loads(metrics.stdout) == api.get(f"/v1/jobs/{job['id']}/metrics").json() == {"items": []}


def test_jobs_all_follows_every_page_and_filters_as_the_api(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, with_worker=False)
    token = stack.token("cli")
    api = stack.client(token)
    speech = [
        api.post("/v1/jobs", json=tiny_wavenet_spec(name=f"asr-{i}", labels={"team": "speech", "sweep": "1"})).json()
        for i in range(5)
    ]
    api.post("/v1/jobs", json=tiny_wavenet_spec(name="vision", labels={"team": "vision"}))
    api.post(f"/v1/jobs/{speech[0]['id']}/cancel")

    everything = json.loads(trainjobs(stack, token, "jobs", "--all", "--limit", "2", "--json").stdout)
    assert len(everything["items"]) == 6 and everything["next_cursor"] is None
    one_page = json.loads(trainjobs(stack, token, "jobs", "--limit", "2", "--json").stdout)
    assert len(one_page["items"]) == 2 and one_page["next_cursor"]

    filtered = trainjobs(
        stack,
        token,
        "jobs",
        "--all",
        "--limit",
        "2",
        "--label",
        "team=speech",
        "--label",
        "sweep",
        "--state",
        "queued,running",
        "--name",
        "ASR",
        "--json",
    )
    assert [job["id"] for job in json.loads(filtered.stdout)["items"]] == [job["id"] for job in reversed(speech[1:])]
    table = trainjobs(stack, token, "jobs", "--label", "team=vision")
    assert table.returncode == 0 and len(table.stdout.splitlines()) == 2 and "team=vision" in table.stdout


def test_delete_version_and_options_before_the_command(stack_on, sqlite_url):
    stack = stack_on(sqlite_url, with_worker=False)
    token = stack.token("cli")
    api = stack.client(token)
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec()).json()["id"]
    still_queued = subprocess.run(
        [TRAINJOBS, "--url", stack.url, "--token", token, "delete", job_id], capture_output=True, text=True, timeout=60
    )
    assert still_queued.returncode == 2 and "queued" in still_queued.stderr
    api.post(f"/v1/jobs/{job_id}/cancel")
    deleted = subprocess.run(
        [TRAINJOBS, "--url", stack.url, "--token", token, "delete", job_id], capture_output=True, text=True, timeout=60
    )
    assert deleted.returncode == 0 and deleted.stdout.strip() == f"deleted {job_id}"
    assert api.get(f"/v1/jobs/{job_id}").status_code == 404

    version = subprocess.run([TRAINJOBS, "--version"], capture_output=True, text=True, timeout=60)
    from importlib.metadata import version as installed

    assert version.returncode == 0 and version.stdout.strip() == f"trainjobs {installed('trainjobs')}"


class AnswersBadGateway(BaseHTTPRequestHandler):
    """What a proxy in front of an API that is down answers."""

    def do_GET(self):
        self.send_response(502)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"detail": "bad gateway"}')

    def log_message(self, *args):
        pass


def test_each_exit_code(stack_on, sqlite_url, tmp_path):
    stack = stack_on(sqlite_url, with_worker=False)
    token = stack.token("cli")
    api = stack.client(token)
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec()).json()["id"]

    assert trainjobs(stack, token, "status", job_id).returncode == 0
    api.post(f"/v1/jobs/{job_id}/cancel")
    watched = trainjobs(stack, token, "watch", job_id)
    assert watched.returncode == 1 and "cancelled" in watched.stdout  # the job did not succeed

    usage = trainjobs(stack, token, "jobs", "--no-such-option")
    assert usage.returncode == 2 and "usage:" in usage.stderr
    no_file = trainjobs(stack, token, "submit", str(tmp_path / "missing.yaml"))
    assert no_file.returncode == 2 and no_file.stderr.count("\n") == 1 and "missing.yaml" in no_file.stderr
    (tmp_path / "broken.yaml").write_text("epochs: [1\n")
    broken = trainjobs(stack, token, "submit", str(tmp_path / "broken.yaml"))
    assert broken.returncode == 2 and broken.stderr.count("\n") == 1
    assert trainjobs(stack, token, "status", "jnosuchjob").returncode == 2
    no_token = subprocess.run(
        [TRAINJOBS, "--url", stack.url, "jobs"],
        capture_output=True,
        text=True,
        timeout=60,
        env={k: v for k, v in os.environ.items() if k != "TRAINJOBS_TOKEN"},
    )
    assert no_token.returncode == 2 and "token" in no_token.stderr

    server = ThreadingHTTPServer(("127.0.0.1", 0), AnswersBadGateway)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        bad_gateway = subprocess.run(
            [TRAINJOBS, "--url", f"http://127.0.0.1:{server.server_port}", "--token", token, "jobs"],
            capture_output=True,
            text=True,
            timeout=60,
        )
    finally:
        server.shutdown()
    assert bad_gateway.returncode == 3 and "HTTP 502" in bad_gateway.stderr


def test_shell_completion_offers_the_commands(stack_on):
    env = dict(os.environ, _ARGCOMPLETE="1", _ARGCOMPLETE_IFS="\n", COMP_LINE="trainjobs de", COMP_POINT="12")
    with tempfile.NamedTemporaryFile("r") as out:
        env["_ARGCOMPLETE_STDOUT_FILENAME"] = out.name
        subprocess.run([TRAINJOBS], env=env, capture_output=True, timeout=60)
        offered = out.read().split()
    assert offered == ["delete"]
