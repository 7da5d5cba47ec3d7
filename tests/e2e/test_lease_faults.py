"""A worker that cannot reach SQL while its job runs: the job's processes end before its lease
runs out (and before the worker frees their devices), so the attempt that takes the job over never
runs beside them. Real API, worker, ranks and SQLite, whose write lock the test holds: each SQL
statement of the worker waits for it up to TRAINJOBS_SQL_TIMEOUT_SECONDS, shorter or longer than
the third of the lease between two renewals."""

from __future__ import annotations

import sqlite3
import time
from datetime import UTC, datetime

import pytest

from devstack import HALF_SECOND_EPOCHS, processes_of_job, rank_pids, tiny_wavenet_spec, wait_for_terminal, wait_until

pytestmark = pytest.mark.e2e

LEASE_SECONDS = 6


@pytest.mark.parametrize("sql_timeout", ["1", "5"])
def test_a_lease_that_cannot_be_renewed_ends_the_job_s_processes_before_it_runs_out(stack_on, sqlite_url, sql_timeout):
    stack = stack_on(sqlite_url, TRAINJOBS_LEASE_SECONDS=str(LEASE_SECONDS), TRAINJOBS_SQL_TIMEOUT_SECONDS=sql_timeout)
    client = stack.client(stack.token())
    job_id = client.post("/v1/jobs", json=tiny_wavenet_spec(epochs=30, data=HALF_SECOND_EPOCHS)).json()["id"]
    rank_pids(job_id, timeout=60)  # training

    # SQLite's write lock, held past the worker's busy timeout and past the lease.
    holder = sqlite3.connect(sqlite_url.removeprefix("sqlite:///"), isolation_level=None, timeout=30)
    holder.execute("BEGIN IMMEDIATE")
    try:
        (expires,) = holder.execute("SELECT lease_expires_at FROM jobs WHERE id = ?", (job_id,)).fetchone()
        wait_until(
            lambda: not processes_of_job(job_id), LEASE_SECONDS, interval=0.05, what="the job's processes to end"
        )
        assert datetime.now(UTC) < datetime.fromisoformat(expires).replace(tzinfo=UTC), "they outlived the lease"
        time.sleep(1)
        assert processes_of_job(job_id) == []  # and none came back while SQL stayed away
    finally:
        holder.execute("ROLLBACK")
        holder.close()

    # The lease ran out meanwhile: the service takes the job up again, from its last checkpoint.
    job = wait_for_terminal(client, job_id, timeout=240)
    assert (job["state"], job["attempt"]) == ("succeeded", 2), job
    epochs = [row["epoch"] for row in client.get(f"/v1/jobs/{job_id}/metrics").json()["items"]]
    assert epochs == list(range(1, 31))
    assert "lease check failed" in stack.log_text("worker") or "SQL did not answer" in stack.log_text("worker")
