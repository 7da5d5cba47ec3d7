"""SQL tables. These are storage classes only; the API's schemas live in trainjobs.contract."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    JSON,
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    String,
    Text,
    TypeDecorator,
    UniqueConstraint,
    true,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column


class UtcDateTime(TypeDecorator):
    """Timezone-aware UTC in and out, on SQLite (which drops the offset) as on PostgreSQL."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect):
        if value is not None and value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        return value.astimezone(UTC) if value is not None else None

    def process_result_value(self, value: datetime | None, dialect):
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    type_annotation_map = {datetime: UtcDateTime, dict[str, Any]: JSON}


class JobRow(Base):
    __tablename__ = "jobs"
    __table_args__ = (
        UniqueConstraint("owner", "idempotency_key", name="uq_jobs_owner_idempotency_key"),
        # Keyset pagination, newest first: for admins over all jobs, for owners over theirs.
        Index("ix_jobs_created_at_id", "created_at", "id"),
        Index("ix_jobs_owner_created_at_id", "owner", "created_at", "id"),
        Index("ix_jobs_state", "state"),
        Index("ix_jobs_state_created_at_id", "state", "created_at", "id"),
    )

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner: Mapped[str] = mapped_column(String(128))
    name: Mapped[str | None] = mapped_column(String(128))
    state: Mapped[str] = mapped_column(String(16))
    stop_reason: Mapped[str | None] = mapped_column(String(32))
    spec: Mapped[dict[str, Any]]
    device: Mapped[str] = mapped_column(String(8))
    world_size: Mapped[int] = mapped_column(Integer)
    epoch: Mapped[int] = mapped_column(Integer, default=0)
    metrics: Mapped[dict[str, Any] | None]
    error: Mapped[str | None] = mapped_column(Text)
    waiting_reason: Mapped[str | None] = mapped_column(Text)
    worker: Mapped[str | None] = mapped_column(String(256))
    workers: Mapped[list[str] | None] = mapped_column(JSON)  # each node's worker, node 0 first
    progress: Mapped[dict[str, Any] | None]  # inside the running epoch; null when not running
    attempt: Mapped[int] = mapped_column(Integer, default=1)
    # Sharing the fleet (the spec's priority and preemptible, copied for the queue's queries).
    priority: Mapped[int] = mapped_column(Integer, default=50, server_default="50")
    preemptible: Mapped[bool] = mapped_column(Boolean, default=True, server_default=true())
    preemptions: Mapped[int] = mapped_column(Integer, default=0, server_default="0")
    preempted_by: Mapped[str | None] = mapped_column(String(32))  # the job its devices last went to
    preempting_for: Mapped[str | None] = mapped_column(String(32))  # while preempting: the job it makes room for
    preempting_since: Mapped[datetime | None]
    queued_at: Mapped[datetime | None]  # when it last entered the queue
    event_seq: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # last job_events.seq
    idempotency_key: Mapped[str | None] = mapped_column(String(256))
    # The lease: the worker that claimed the job renews it while the job runs.
    lease_owner: Mapped[str | None] = mapped_column(String(256))
    lease_expires_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    started_at: Mapped[datetime | None]
    finished_at: Mapped[datetime | None]
    updated_at: Mapped[datetime]


class JobLabelRow(Base):
    """One label of a job. The job's owner and creation time are copied here (neither ever
    changes) so that `GET /v1/jobs?label=k=v` walks one index newest first and stops after a
    page, with or without an owner, instead of gathering every match and sorting it."""

    __tablename__ = "job_labels"
    __table_args__ = (
        Index("ix_job_labels_key_value_created", "key", "value", "job_created_at", "job_id"),
        Index("ix_job_labels_owner_key_value_created", "owner", "key", "value", "job_created_at", "job_id"),
        Index("ix_job_labels_key_created", "key", "job_created_at", "job_id"),
        Index("ix_job_labels_owner_key_created", "owner", "key", "job_created_at", "job_id"),
    )

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    key: Mapped[str] = mapped_column(String(63), primary_key=True)
    value: Mapped[str] = mapped_column(String(256))
    owner: Mapped[str] = mapped_column(String(128))
    job_created_at: Mapped[datetime]


class EpochMetricsRow(Base):
    __tablename__ = "epoch_metrics"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    epoch: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer)
    data: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class CheckpointRow(Base):
    __tablename__ = "checkpoints"

    id: Mapped[str] = mapped_column(String(64), primary_key=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), index=True)
    epoch: Mapped[int] = mapped_column(Integer)
    step: Mapped[int] = mapped_column(Integer, default=0, server_default="0")  # optimizer steps into the next epoch
    path: Mapped[str] = mapped_column(String(512))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str] = mapped_column(String(64))
    is_best: Mapped[bool] = mapped_column(Boolean, default=False)
    objective: Mapped[float | None] = mapped_column(Float, nullable=True)  # the spec's objective at that epoch
    created_at: Mapped[datetime]


class JobEventRow(Base):
    """What happened to a job, in order: the server-sent event stream and its Last-Event-ID
    resume read this table. `seq` is the event id clients see: numbered per job under the job
    row's lock, so a reader never sees event n+1 before event n has committed."""

    __tablename__ = "job_events"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    seq: Mapped[int] = mapped_column(Integer, primary_key=True)
    kind: Mapped[str] = mapped_column(String(16))
    data: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]


class JobNodeRow(Base):
    """A worker holding one node of a multi-node job's attempt: first while the job gathers its
    nodes (the worker's devices are leased meanwhile), then while it runs. Each member renews
    its own lease; when any lapses the reaper requeues the whole job."""

    __tablename__ = "job_nodes"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    attempt: Mapped[int] = mapped_column(Integer, primary_key=True)
    node_rank: Mapped[int] = mapped_column(Integer, primary_key=True)
    worker: Mapped[str] = mapped_column(String(256))
    address: Mapped[str] = mapped_column(String(256))
    lease_expires_at: Mapped[datetime]


class JobLogLineRow(Base):
    """One line of a rank's output, shipped by its launcher while the job runs. `id` orders
    lines as they arrived (what `logs?follow=true` streams by)."""

    __tablename__ = "job_log_lines"
    __table_args__ = (
        UniqueConstraint("job_id", "attempt", "rank", "line_no", name="uq_job_log_lines_position"),
        Index("ix_job_log_lines_job_id_id", "job_id", "id"),
    )

    id: Mapped[int] = mapped_column(BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True)
    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"))
    attempt: Mapped[int] = mapped_column(Integer)
    rank: Mapped[int] = mapped_column(Integer)
    line_no: Mapped[int] = mapped_column(Integer)
    text: Mapped[str] = mapped_column(Text)


class ApiTokenRow(Base):
    __tablename__ = "api_tokens"

    id: Mapped[str] = mapped_column(String(32), primary_key=True)
    owner: Mapped[str] = mapped_column(String(128))
    is_admin: Mapped[bool] = mapped_column(Boolean, default=False)
    token_sha256: Mapped[str] = mapped_column(String(64), unique=True)
    created_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class CodeArchiveRow(Base):
    """A code archive an owner uploaded. The bytes live once in the checkpoint store, named by
    their sha256 (trainjobs.contract.code.stored_path); each owner who uploaded them has a row,
    and sees only their own."""

    __tablename__ = "code_archives"

    owner: Mapped[str] = mapped_column(String(128), primary_key=True)
    id: Mapped[str] = mapped_column(String(71), primary_key=True)  # sha256:<64 hex>
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    files: Mapped[int] = mapped_column(Integer)
    created_at: Mapped[datetime]


class DispatchIntentRow(Base):
    """The outbox: written in the job's own transaction, deleted once the message is sent."""

    __tablename__ = "dispatch_intents"

    job_id: Mapped[str] = mapped_column(ForeignKey("jobs.id", ondelete="CASCADE"), primary_key=True)
    device: Mapped[str] = mapped_column(String(8))
    created_at: Mapped[datetime]


class StoreDeletionRow(Base):
    """A file (or a job's folder, `tree`) of the checkpoint store to delete: written in the
    transaction that removed the rows naming it, deleted once the store says it is gone. The
    background sweep tries each again, with back-off, until then (service.store_deletions)."""

    __tablename__ = "store_deletions"

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    path: Mapped[str] = mapped_column(String(512))
    tree: Mapped[bool] = mapped_column(Boolean, default=False)
    tries: Mapped[int] = mapped_column(Integer, default=0)
    next_try_at: Mapped[datetime] = mapped_column(index=True)
    created_at: Mapped[datetime]


class OwnerRow(Base):
    """An owner's sharing settings; an owner without a row has the defaults."""

    __tablename__ = "owners"

    owner: Mapped[str] = mapped_column(String(128), primary_key=True)
    weight: Mapped[float] = mapped_column(Float)
    max_cuda: Mapped[int | None] = mapped_column(Integer)
    max_cpu: Mapped[int | None] = mapped_column(Integer)
    max_priority: Mapped[int] = mapped_column(Integer)
    allow_non_preemptible: Mapped[bool] = mapped_column(Boolean)
    updated_at: Mapped[datetime]
