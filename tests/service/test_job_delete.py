"""DELETE /v1/jobs/{id} on the real app, real SQL (SQLite and PostgreSQL) and a real local
checkpoint store: every answer, everything of the job gone, and its checkpoints refused later."""

from __future__ import annotations

import hashlib
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
from sqlalchemy import func, select

from devstack import tiny_wavenet_spec
from trainjobs.contract.checkpoints import checkpoint_id, checkpoint_path
from trainjobs.contract.events import CheckpointRecord, EpochMetrics, LogLines
from trainjobs.jobs import lifecycle
from trainjobs.jobs.db import transaction
from trainjobs.jobs.repositories import job_logs, jobs
from trainjobs.jobs.tables import (
    CheckpointRow,
    DispatchIntentRow,
    EpochMetricsRow,
    JobEventRow,
    JobLabelRow,
    JobLogLineRow,
    JobNodeRow,
    JobRow,
)

CHILD_TABLES = (EpochMetricsRow, CheckpointRow, JobEventRow, JobLogLineRow, JobNodeRow, JobLabelRow, DispatchIntentRow)


@pytest.fixture
def sessions(writer_sessions):
    """They stand in for a worker's and the collector's."""
    return writer_sessions


def ended_job_with_results(api, headers, sessions, store_root: Path) -> tuple[str, list[str]]:
    """A cancelled job that has, as a run leaves them, an epoch's metrics, two checkpoints (rows
    and files in the store), log lines and its events. Returns (job id, checkpoint ids)."""
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(labels={"team": "speech"}), headers=headers).json()["id"]
    ids = []
    with transaction(sessions) as session:
        job = jobs.get(session, job_id, for_update=True)
        lifecycle.record_epoch(
            session,
            job,
            1,
            EpochMetrics(epoch=1, train_loss=1.0, val_loss=1.0, lr=0.01, epoch_seconds=1.0, samples_per_second=10.0),
        )
        job_logs.append(session, job_id, 1, LogLines(rank=0, first_line=0, lines=["hello"]), cap=100)
        for epoch in (1, 2):
            checkpoint, content = checkpoint_id(job_id, epoch), f"weights {epoch}".encode()
            path = store_root / checkpoint_path(job_id, checkpoint, 1)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)
            record = CheckpointRecord(
                id=checkpoint,
                epoch=epoch,
                size_bytes=len(content),
                sha256=hashlib.sha256(content).hexdigest(),
                is_best=epoch == 1,
                created_at=datetime.now(UTC),
                path=checkpoint_path(job_id, checkpoint, 1),
            )
            lifecycle.record_checkpoint(session, job, 1, record)
            ids.append(checkpoint)
    assert api.post(f"/v1/jobs/{job_id}/cancel", headers=headers).json()["state"] == "cancelled"
    return job_id, ids


def rows_of(sessions, job_id: str) -> dict[str, int]:
    with transaction(sessions) as session:
        counts = {
            table.__tablename__: session.scalar(select(func.count()).select_from(table).where(table.job_id == job_id))
            for table in CHILD_TABLES
        }
        counts["jobs"] = session.scalar(select(func.count()).select_from(JobRow).where(JobRow.id == job_id))
    return counts


@pytest.fixture
def store_root(settings) -> Path:
    return Path(settings.checkpoint_store)


def test_deleting_an_ended_job_removes_it_with_its_results_and_files(api, alice, sessions, store_root):
    job_id, _ = ended_job_with_results(api, alice, sessions, store_root)
    before = rows_of(sessions, job_id)
    assert all(
        before[table] for table in ("jobs", "epoch_metrics", "checkpoints", "job_events", "job_log_lines", "job_labels")
    )
    assert len(list((store_root / job_id).glob("a*/*.pt"))) == 2

    response = api.delete(f"/v1/jobs/{job_id}", headers=alice)
    assert response.status_code == 204 and response.content == b""
    assert set(rows_of(sessions, job_id).values()) == {0}
    assert not (store_root / job_id).exists()
    for path in ("", "/metrics", "/checkpoints", "/logs"):
        assert api.get(f"/v1/jobs/{job_id}{path}", headers=alice).status_code == 404, path
    assert api.get("/v1/jobs", params={"label": "team=speech"}, headers=alice).json()["items"] == []
    assert api.delete(f"/v1/jobs/{job_id}", headers=alice).status_code == 404


def test_a_job_that_has_not_ended_is_409_and_kept(api, alice, sessions):
    job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    response = api.delete(f"/v1/jobs/{job_id}", headers=alice)
    assert response.status_code == 409 and "queued" in response.json()["detail"]
    with transaction(sessions) as session:
        lifecycle.claim(session, job_id, "w1", lease_seconds=30)
    assert api.delete(f"/v1/jobs/{job_id}", headers=alice).status_code == 409
    assert api.get(f"/v1/jobs/{job_id}", headers=alice).json()["state"] == "running"


def test_another_owners_job_is_404_and_kept(api, alice, bob, sessions, store_root):
    job_id, _ = ended_job_with_results(api, alice, sessions, store_root)
    assert api.delete(f"/v1/jobs/{job_id}", headers=bob).status_code == 404
    assert api.delete("/v1/jobs/jnosuchjob", headers=alice).status_code == 404
    assert rows_of(sessions, job_id)["checkpoints"] == 2 and (store_root / job_id).is_dir()


@pytest.mark.parametrize("field", ["resume_from", "init_from"])
def test_a_deleted_jobs_checkpoint_is_refused_at_submit(api, alice, sessions, store_root, field):
    job_id, checkpoint_ids = ended_job_with_results(api, alice, sessions, store_root)
    assert api.post("/v1/jobs", json=tiny_wavenet_spec(**{field: checkpoint_ids[1]}), headers=alice).status_code == 201
    queued = api.get("/v1/jobs", params={"state": "queued"}, headers=alice).json()["items"][0]
    api.post(f"/v1/jobs/{queued['id']}/cancel", headers=alice)

    assert api.delete(f"/v1/jobs/{job_id}", headers=alice).status_code == 204
    response = api.post("/v1/jobs", json=tiny_wavenet_spec(**{field: checkpoint_ids[1]}), headers=alice)
    assert response.status_code == 422
    assert field in str(response.json()["detail"]) and checkpoint_ids[1] in str(response.json()["detail"])


def test_a_job_queued_to_start_from_its_checkpoint_holds_the_delete_off(api, alice, bob, sessions, store_root):
    job_id, checkpoint_ids = ended_job_with_results(api, alice, sessions, store_root)
    waiting = api.post("/v1/jobs", json=tiny_wavenet_spec(resume_from=checkpoint_ids[0]), headers=alice).json()
    response = api.delete(f"/v1/jobs/{job_id}", headers=alice)
    assert response.status_code == 409 and waiting["id"] in response.json()["detail"]
    assert (store_root / job_id).is_dir()

    api.post(f"/v1/jobs/{waiting['id']}/cancel", headers=alice)
    assert api.delete(f"/v1/jobs/{job_id}", headers=alice).status_code == 204


def test_the_retention_sweep_deletes_jobs_that_ended_longer_ago_than_the_setting(
    api, alice, sessions, store_root, settings
):
    from trainjobs.service import retention
    from trainjobs.store import CheckpointStore

    old, old_checkpoints = ended_job_with_results(api, alice, sessions, store_root)
    held = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    api.post(f"/v1/jobs/{held}/cancel", headers=alice)
    waiting = api.post("/v1/jobs", json=tiny_wavenet_spec(init_from=old_checkpoints[0]), headers=alice).json()["id"]
    still_queued = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    store = CheckpointStore(settings.checkpoint_store)
    one_second = 1 / 86400
    time.sleep(1.2)
    young = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
    api.post(f"/v1/jobs/{young}/cancel", headers=alice)

    # `old` is held while a queued job will start from its checkpoint; `held` has no such tie.
    assert retention.delete_expired(sessions, store, one_second) == 1
    assert api.get(f"/v1/jobs/{held}", headers=alice).status_code == 404
    assert api.get(f"/v1/jobs/{old}", headers=alice).status_code == 200
    api.post(f"/v1/jobs/{waiting}/cancel", headers=alice)
    time.sleep(1.2)  # `waiting` ended just now: it expires a second later
    assert retention.delete_expired(sessions, store, one_second) == 3  # old, waiting, young
    assert rows_of(sessions, old)["jobs"] == 0 and not (store_root / old).exists()
    assert api.get(f"/v1/jobs/{still_queued}", headers=alice).json()["state"] == "queued"  # never a live job
    assert retention.delete_expired(sessions, store, 30) == 0


def test_the_retention_sweep_deletes_each_job_in_a_transaction_of_its_own(api, alice, sessions, settings):
    """One transaction for a batch of a hundred big jobs held SQLite's write lock for seconds."""
    from sqlalchemy import event

    from trainjobs.service import retention
    from trainjobs.store import CheckpointStore

    for _ in range(3):
        job_id = api.post("/v1/jobs", json=tiny_wavenet_spec(), headers=alice).json()["id"]
        api.post(f"/v1/jobs/{job_id}/cancel", headers=alice)
    time.sleep(1.2)
    commits: list[object] = []

    def note_commit(session):
        commits.append(session)

    event.listen(sessions, "after_commit", note_commit)
    try:
        assert retention.delete_expired(sessions, CheckpointStore(settings.checkpoint_store), 1 / 86400) == 3
    finally:
        event.remove(sessions, "after_commit", note_commit)
    assert len(commits) == 1 + 3  # the listing, then one per job
