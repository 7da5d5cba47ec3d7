"""sharing the fleet: jobs' priority, preemption and its bookkeeping; owners' settings; a
checkpoint's step

Revision ID: 0009
Revises: 0008
"""

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as jobs:
        jobs.add_column(sa.Column("priority", sa.Integer(), nullable=False, server_default="50"))
        jobs.add_column(sa.Column("preemptible", sa.Boolean(), nullable=False, server_default=sa.true()))
        jobs.add_column(sa.Column("preemptions", sa.Integer(), nullable=False, server_default="0"))
        jobs.add_column(sa.Column("preempted_by", sa.String(32), nullable=True))
        jobs.add_column(sa.Column("preempting_for", sa.String(32), nullable=True))
        jobs.add_column(sa.Column("preempting_since", sa.DateTime(timezone=True), nullable=True))
        jobs.add_column(sa.Column("queued_at", sa.DateTime(timezone=True), nullable=True))
    op.execute("UPDATE jobs SET queued_at = created_at WHERE state = 'queued'")
    with op.batch_alter_table("checkpoints") as checkpoints:
        checkpoints.add_column(sa.Column("step", sa.Integer(), nullable=False, server_default="0"))
    op.create_table(
        "owners",
        sa.Column("owner", sa.String(128), primary_key=True),
        sa.Column("weight", sa.Float(), nullable=False),
        sa.Column("max_cuda", sa.Integer(), nullable=True),
        sa.Column("max_cpu", sa.Integer(), nullable=True),
        sa.Column("max_priority", sa.Integer(), nullable=False),
        sa.Column("allow_non_preemptible", sa.Boolean(), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("owners")
    with op.batch_alter_table("checkpoints") as checkpoints:
        checkpoints.drop_column("step")
    with op.batch_alter_table("jobs") as jobs:
        for column in ("queued_at", "preempting_since", "preempting_for", "preempted_by", "preemptions"):
            jobs.drop_column(column)
        jobs.drop_column("preemptible")
        jobs.drop_column("priority")
