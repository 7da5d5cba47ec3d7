"""The schema's history on a database full of jobs: a downgrade and the upgrade after it keep every
row that both schemas hold (SQLite's table rebuilds must not cascade), on SQLite and PostgreSQL."""

from __future__ import annotations

from alembic import command
from sqlalchemy import inspect, text

from devstack import job_sessions, tiny_wavenet_spec
from trainjobs.contract.checkpoints import checkpoint_id, checkpoint_path
from trainjobs.contract.clock import utcnow
from trainjobs.contract.events import CheckpointRecord, EpochMetrics, LogLines
from trainjobs.contract.spec import JobSpec
from trainjobs.jobs import lifecycle
from trainjobs.jobs.db import make_engine, transaction
from trainjobs.jobs.repositories import job_logs, jobs
from trainjobs.service.migrate import alembic_config

TABLES = (
    "jobs", "job_labels", "epoch_metrics", "checkpoints", "job_events", "job_log_lines", "job_nodes",
    "dispatch_intents", "api_tokens", "code_archives", "owners",
)  # fmt: skip


def fill(sessions, count: int = 12) -> None:
    """Jobs as a service holds them after a while: queued, running and finished, with labels,
    metrics, checkpoints, events and log lines."""
    spec = JobSpec.model_validate(tiny_wavenet_spec(labels={"team": "speech"}))
    for index in range(count):
        with transaction(sessions) as session:
            job = lifecycle.submit(session, "alice", spec, None)
        if index % 3 == 0:
            continue  # stays queued, with its dispatch intent
        with transaction(sessions) as session:
            job = lifecycle.claim(session, job.id, "w1", lease_seconds=30)
            for epoch in (1, 2):
                figures = {"train_loss": 2.0, "val_loss": 2.1, "lr": 0.01, "epoch_seconds": 1.0}
                lifecycle.record_epoch(session, job, 1, EpochMetrics(epoch=epoch, samples_per_second=9.0, **figures))
                record = CheckpointRecord(
                    id=checkpoint_id(job.id, epoch), epoch=epoch, size_bytes=1, sha256="0" * 64, is_best=False,
                    created_at=utcnow(), path=checkpoint_path(job.id, checkpoint_id(job.id, epoch), 1),
                )  # fmt: skip
                lifecycle.record_checkpoint(session, job, 1, record)
            job_logs.append(session, job.id, 1, LogLines(rank=0, first_line=0, lines=["a", "b"]), cap=100)
        if index % 3 == 2:
            with transaction(sessions) as session:
                lifecycle.cancel(session, jobs.get(session, job.id, for_update=True))
    with transaction(sessions) as session:  # a 2-node job, one of its nodes held while it gathers
        gathering = lifecycle.submit(session, "bob", JobSpec.model_validate(tiny_wavenet_spec(nodes=2)), None)
        lifecycle.join(session, gathering, "w2", "10.0.0.2", lease_seconds=30)


def row_counts(url: str) -> dict[str, int]:
    engine = make_engine(url)
    try:
        present = set(inspect(engine).get_table_names())
        with engine.connect() as connection:
            return {
                table: connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one()
                for table in TABLES
                if table in present
            }
    finally:
        engine.dispose()


def test_a_downgrade_and_the_upgrade_after_it_keep_every_job_s_rows(database_url, namespace):
    fill(job_sessions(database_url, namespace))
    before = row_counts(database_url)
    assert all(before[table] > 0 for table in TABLES if table not in ("api_tokens", "code_archives", "owners")), before

    config = alembic_config(database_url)
    command.downgrade(config, "0005")  # past the table rebuild of 0006 (jobs.progress)
    downgraded = row_counts(database_url)
    assert downgraded == {table: count for table, count in before.items() if table in downgraded}
    assert {"job_labels", "code_archives", "owners"}.isdisjoint(downgraded)  # 0007, 0008 and 0009 made them

    command.upgrade(config, "head")
    assert row_counts(database_url) == before  # job_labels filled again from the jobs' specs
