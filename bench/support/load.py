"""Load for the API benchmarks: jobs seeded straight into SQL, and wrk."""

from __future__ import annotations

import re
import secrets
import subprocess
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path

from sqlalchemy import insert

from devstack import tiny_wavenet_spec
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
            rows = [
                _job_row(job_id, f"run-{index}", owner, spec, labels[index], start + timedelta(seconds=index))
                | _outcome(queued=index >= count - QUEUED)
                for index, job_id in batch
            ]
            connection.execute(insert(JobRow), rows)
            label_rows = [
                {"job_id": row["id"], "key": key, "value": value, "owner": owner, "job_created_at": row["created_at"]}
                for row in rows
                for key, value in row["spec"]["labels"].items()
            ]
            if label_rows:
                connection.execute(insert(JobLabelRow), label_rows)
    engine.dispose()
    return ids[len(ids) // 2]


def _job_row(job_id: str, name: str, owner: str, spec: dict, labels: dict[str, str], created_at: datetime) -> dict:
    return {
        "id": job_id,
        "owner": owner,
        "name": name,
        "spec": {**spec, "labels": labels},
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
        "created_at": created_at,
        "started_at": None,
        "finished_at": None,
        "updated_at": created_at,
    }


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
