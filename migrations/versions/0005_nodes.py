"""jobs across hosts: jobs.workers, and job_nodes (a worker holding one node of an attempt)

Revision ID: 0005
Revises: 0004
"""

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("jobs") as batch:
        batch.add_column(sa.Column("workers", sa.JSON(), nullable=True))
    op.create_table(
        "job_nodes",
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("node_rank", sa.Integer(), nullable=False),
        sa.Column("worker", sa.String(length=256), nullable=False),
        sa.Column("address", sa.String(length=256), nullable=False),
        sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("job_id", "attempt", "node_rank"),
    )


def downgrade() -> None:
    op.drop_table("job_nodes")
    with op.batch_alter_table("jobs") as batch:
        batch.drop_column("workers")
