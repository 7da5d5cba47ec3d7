"""store_deletions: checkpoint store files to delete, tried again until they are gone

Revision ID: 0010
Revises: 0009
"""

import sqlalchemy as sa
from alembic import op

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "store_deletions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("path", sa.String(512), nullable=False),
        sa.Column("tree", sa.Boolean(), nullable=False),
        sa.Column("tries", sa.Integer(), nullable=False),
        sa.Column("next_try_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_store_deletions_next_try_at", "store_deletions", ["next_try_at"])


def downgrade() -> None:
    op.drop_index("ix_store_deletions_next_try_at", table_name="store_deletions")
    op.drop_table("store_deletions")
