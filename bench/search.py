"""Job search at 100,000 jobs: `GET /v1/jobs` with label, state and name filters against a real
API process, on SQLite and PostgreSQL; p50 and p99 of sequential requests (one client, so each
figure is the query's own cost, not queueing).

The jobs are one owner's (the worst case: every filter walks that owner's history), labelled as
a busy team's would be: `team` one of 10 values (10% each), `sweep` one of 1,000 (0.1% each), and
`priority=high` on 1%. The label index rows carry the owner and creation time, so a filter walks
one index newest first and stops after a page; a name is a substring that no index serves.
"""

from __future__ import annotations

import statistics
import tempfile
import time
from pathlib import Path

from bench.support.load import seed_jobs
from devstack import REDIS_URL, Stack, new_token, sql_database
from trainjobs.jobs.db import make_engine

TEAMS = [f"team{i}" for i in range(10)]
CASES = {
    "label=team=team3 (10%)": {"label": "team=team3"},
    "label=sweep=42 (0.1%)": {"label": "sweep=42"},
    "label=team=team3&label=sweep=43 (AND, 0.1%)": {"label": ["team=team3", "sweep=43"]},
    "label=priority (a key alone, 1%)": {"label": "priority"},
    "state=queued,failed": {"state": "queued,failed"},
    "name=run-4242 (substring, no index)": {"name": "run-4242"},
    "no filter": {},
}


def labels_of(index: int) -> dict[str, str]:
    labels = {"team": TEAMS[index % 10], "sweep": str(index % 1000)}
    if index % 100 == 7:
        labels["priority"] = "high"
    return labels


def analyze(url: str) -> None:
    engine = make_engine(url)
    with engine.connect() as connection:
        connection.execution_options(isolation_level="AUTOCOMMIT").exec_driver_sql("ANALYZE")
    engine.dispose()


def latencies(client, params: dict, requests: int) -> list[float]:
    taken = []
    for _ in range(requests):
        started = time.perf_counter()
        response = client.get("/v1/jobs", params={**params, "limit": 50})
        taken.append(time.perf_counter() - started)
        response.raise_for_status()
    return taken


def run(count: int = 100_000, databases=("sqlite", "postgresql"), requests: int = 200) -> dict:
    rows = []
    for database in databases:
        with tempfile.TemporaryDirectory() as scratch, sql_database(database, Path(scratch)) as url:
            seed_jobs(url, count, "loadtest", labels_of)
            if database == "postgresql":
                analyze(url)  # as autovacuum would have by now on a live database
            stack = Stack(Path(scratch) / "stack", url, REDIS_URL)
            stack.start_api()
            try:
                for owner_view, token in (
                    ("owner", new_token(url, "loadtest")),
                    ("admin", new_token(url, "root", True)),
                ):
                    client = stack.client(token)
                    for name, params in CASES.items():
                        found = len(client.get("/v1/jobs", params={**params, "limit": 50}).json()["items"])
                        taken = sorted(latencies(client, params, requests))
                        row = {
                            "database": database,
                            "jobs": count,
                            "caller": owner_view,
                            "query": name,
                            "page": found,
                            "p50_ms": round(1000 * statistics.median(taken), 1),
                            "p99_ms": round(1000 * taken[int(0.99 * (len(taken) - 1))], 1),
                        }
                        print(
                            f"search {database:<10} {owner_view:<5} {name:<46} {found:>3} items  "
                            f"p50 {row['p50_ms']:>7} ms  p99 {row['p99_ms']:>7} ms",
                            flush=True,
                        )
                        rows.append(row)
            finally:
                stack.stop()
    return {"search": rows}
