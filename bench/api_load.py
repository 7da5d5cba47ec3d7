"""API under dashboard load: wrk (a second process) against a real API process, with 1,000 and
100,000 jobs stored, on SQLite and PostgreSQL, at 1, 50 and 200 concurrent connections.

Jobs are seeded straight into SQL (one owner, so every list query walks that owner's index), as
a service's table looks after a while: history (finished jobs) with the newest `QUEUED` still
queued. A queue of 100,000 with no worker would measure the one-off labelling of their waiting
reasons (500 per sweep, see service.reaper) rather than the API.
"""

from __future__ import annotations

import re
import secrets
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path

from sqlalchemy import insert

from devstack import REDIS_URL, Stack, new_token, sql_database, tiny_wavenet_spec
from trainjobs.contract.clock import utcnow
from trainjobs.contract.spec import JobSpec
from trainjobs.jobs.db import make_engine
from trainjobs.jobs.tables import JobLabelRow, JobRow

WRK_SCRIPT = """
wrk.method = os.getenv("WRK_METHOD") or "GET"
wrk.headers["Authorization"] = "Bearer " .. os.getenv("WRK_TOKEN")
local etag = os.getenv("WRK_ETAG")
if etag and etag ~= "" then wrk.headers["If-None-Match"] = etag end
local body = os.getenv("WRK_BODY")
if body and body ~= "" then
  wrk.body = body
  wrk.headers["Content-Type"] = "application/json"
end
"""


QUEUED = 100


def seed_jobs(
    database_url: str, count: int, owner: str, labels_of: Callable[[int], dict[str, str]] | None = None
) -> str:
    """Insert `count` jobs, the newest QUEUED queued and the rest succeeded; return the id of one
    in the middle. `labels_of(index)`: the labels of the index-th job (none by default)."""
    spec = JobSpec.model_validate(tiny_wavenet_spec(gpus=3)).model_dump(mode="json")
    engine = make_engine(database_url)
    start = utcnow() - timedelta(days=30)
    ids = [f"j{secrets.token_hex(8)}" for _ in range(count)]
    with engine.begin() as connection:
        for chunk in range(0, count, 5000):
            batch = list(enumerate(ids[chunk : chunk + 5000], start=chunk))
            labels = {index: labels_of(index) if labels_of else {} for index, _ in batch}
            connection.execute(
                insert(JobRow),
                [
                    {
                        "id": job_id,
                        "owner": owner,
                        "name": f"run-{index}",
                        **_outcome(index >= count - QUEUED),
                        "spec": {**spec, "labels": labels[index]},
                        "device": "cpu",
                        "world_size": 3,
                        "epoch": 0,
                        "metrics": None,
                        "error": None,
                        "waiting_reason": None,
                        "worker": None,
                        "attempt": 1,
                        "event_seq": 0,
                        "idempotency_key": None,
                        "lease_owner": None,
                        "lease_expires_at": None,
                        "created_at": start + timedelta(seconds=index),
                        "started_at": None,
                        "finished_at": None,
                        "updated_at": start + timedelta(seconds=index),
                    }
                    for index, job_id in batch
                ],
            )
            label_rows = [
                {
                    "job_id": job_id,
                    "key": key,
                    "value": value,
                    "owner": owner,
                    "job_created_at": start + timedelta(seconds=index),
                }
                for index, job_id in batch
                for key, value in labels[index].items()
            ]
            if label_rows:
                connection.execute(insert(JobLabelRow), label_rows)
    engine.dispose()
    return ids[len(ids) // 2]


def _outcome(queued: bool) -> dict:
    return {"state": "queued", "stop_reason": None} if queued else {"state": "succeeded", "stop_reason": "completed"}


def wrk(url: str, connections: int, seconds: int, env: dict[str, str], script: Path) -> dict:
    threads = min(connections, 2)
    out = subprocess.run(
        [
            "wrk",
            f"-t{threads}",
            f"-c{connections}",
            f"-d{seconds}s",
            "--timeout",
            "30s",
            "--latency",
            "-s",
            str(script),
            url,
        ],
        capture_output=True,
        text=True,
        env=env,
        check=True,
    ).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))
    percentiles = dict(re.findall(r"^\s+(50|99)%\s+([\d.]+\w+)", out, re.MULTILINE))
    non_2xx = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    socket_errors = re.search(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)", out)
    errors = int(non_2xx.group(1)) if non_2xx else 0
    errors += sum(map(int, socket_errors.groups())) if socket_errors else 0
    time.sleep(1)  # let the API drain what wrk left in flight before the next run
    return {"requests_per_s": rps, "p50": percentiles.get("50"), "p99": percentiles.get("99"), "errors": errors}


def run(
    sizes=(1_000, 100_000), databases=("sqlite", "postgresql"), concurrency=(1, 50, 200), seconds: int = 3
) -> list[dict]:
    if shutil.which("wrk") is None:
        raise RuntimeError("wrk is not installed (apt-get install wrk)")
    rows = []
    for database in databases:
        for size in sizes:
            with tempfile.TemporaryDirectory() as scratch, sql_database(database, Path(scratch)) as url:
                home = Path(scratch)
                job_id = seed_jobs(url, size, "loadtest")
                token = new_token(url, "loadtest")
                stack = Stack(home / "stack", url, REDIS_URL)
                stack.start_api()
                script = home / "auth.lua"
                script.write_text(WRK_SCRIPT)
                try:
                    etag = stack.client(token).get(f"/v1/jobs/{job_id}").headers["ETag"]
                    body = JobSpec.model_validate(tiny_wavenet_spec(gpus=3)).model_dump_json()
                    cases = {
                        "GET job (200)": (f"/v1/jobs/{job_id}", {}),
                        "GET job (304)": (f"/v1/jobs/{job_id}", {"WRK_ETAG": etag}),
                        "GET jobs page": ("/v1/jobs?limit=50", {}),
                        "POST job": ("/v1/jobs", {"WRK_METHOD": "POST", "WRK_BODY": body}),
                    }
                    for name, (path, extra) in cases.items():
                        for clients in concurrency:
                            env = {"PATH": "/usr/bin:/bin", "WRK_TOKEN": token, **extra}
                            result = wrk(stack.url + path, clients, seconds, env, script)
                            row = {"database": database, "jobs": size, "request": name, "clients": clients, **result}
                            print(
                                f"api  {database:<10} {size:>7} jobs  {name:<14} {clients:>3} clients: "
                                f"{result['requests_per_s']:8.1f} req/s  p50 {result['p50']:>8}  p99 {result['p99']:>8}"
                                f"  non-2xx/3xx {result['errors']}",
                                flush=True,
                            )
                            rows.append(row)
                finally:
                    stack.stop()
    return rows
