"""API under dashboard load: wrk (a second process) against a real API process, with 1,000 and
100,000 jobs stored, on SQLite and PostgreSQL, at 1, 50 and 200 concurrent connections.

Jobs are seeded straight into SQL (one owner, so every list query walks that owner's index), as
a service's table looks after a while: history (finished jobs) with the newest `QUEUED` still
queued. A queue of 100,000 with no worker would measure the one-off labelling of their waiting
reasons (500 per sweep, see service.reaper) rather than the API.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from bench.support.load import WRK_SCRIPT, seed_jobs, wrk
from devstack import REDIS_URL, Stack, new_token, sql_database, tiny_wavenet_spec
from trainjobs.contract.spec import JobSpec


def run(sizes=(1_000, 100_000), databases=("sqlite", "postgresql"), concurrency=(1, 50, 200), seconds: int = 3) -> dict:
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
    return {"api": rows}
