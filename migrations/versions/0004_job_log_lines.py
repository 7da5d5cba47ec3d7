"""job_log_lines: ranks' output, shipped over Redis while a job runs

Revision ID: 0004
Revises: 0003
"""

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "job_log_lines",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=32), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("rank", sa.Integer(), nullable=False),
        sa.Column("line_no", sa.Integer(), nullable=False),
        sa.Column("text", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(["job_id"], ["jobs.id"], ondelete="CASCADE"),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("job_id", "attempt", "rank", "line_no", name="uq_job_log_lines_position"),
    )
    op.create_index("ix_job_log_lines_job_id_id", "job_log_lines", ["job_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_job_log_lines_job_id_id", table_name="job_log_lines")
    op.drop_table("job_log_lines")
