"""job_labels: a job's labels, indexed for `GET /v1/jobs?label=`; jobs by state, newest first

Revision ID: 0007
Revises: 0006
"""

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_labels",
        sa.Column("job_id", sa.String(32), nullable=False),
        sa.Column("key", sa.String(63), nullable=False),
        sa.Column("value", sa.String(256), nullable=False),
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("job_created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "key"),
    )
    op.create_index("ix_job_labels_key_value_created", "job_labels", ["key", "value", "job_created_at", "job_id"])
    op.create_index(
        "ix_job_labels_owner_key_value_created", "job_labels", ["owner", "key", "value", "job_created_at", "job_id"]
    )
    op.create_index("ix_job_labels_key_created", "job_labels", ["key", "job_created_at", "job_id"])
    op.create_index("ix_job_labels_owner_key_created", "job_labels", ["owner", "key", "job_created_at", "job_id"])
    op.create_index("ix_jobs_state_created_at_id", "jobs", ["state", "created_at", "id"])
    _copy_labels_from_specs()


def _copy_labels_from_specs() -> None:
    """Jobs that hold labels in their spec (stored before a downgrade past this revision) get
    their rows again: a label search must find them."""
    connection = op.get_bind()
    jobs = sa.table(
        "jobs", sa.column("id"), sa.column("owner"), sa.column("created_at", sa.DateTime(timezone=True)),
        sa.column("spec", sa.JSON()),
    )  # fmt: skip
    labels = sa.table(
        "job_labels", sa.column("job_id"), sa.column("key"), sa.column("value"), sa.column("owner"),
        sa.column("job_created_at", sa.DateTime(timezone=True)),
    )  # fmt: skip
    rows = [
        {"job_id": job.id, "key": key, "value": value, "owner": job.owner, "job_created_at": job.created_at}
        for job in connection.execute(sa.select(jobs))
        for key, value in ((job.spec or {}).get("labels") or {}).items()
    ]
    if rows:
        connection.execute(sa.insert(labels), rows)


def downgrade() -> None:
    op.drop_index("ix_jobs_state_created_at_id", table_name="jobs")
    op.drop_table("job_labels")
