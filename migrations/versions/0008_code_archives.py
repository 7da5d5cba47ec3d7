"""code_archives: the code archives owners uploaded (POST /v1/code)

Revision ID: 0008
Revises: 0007
"""

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "code_archives",
        sa.Column("owner", sa.String(128), nullable=False),
        sa.Column("id", sa.String(71), nullable=False),
        sa.Column("size_bytes", sa.BigInteger(), nullable=False),
        sa.Column("files", sa.Integer(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("owner", "id"),
    )
    op.create_index("ix_code_archives_id", "code_archives", ["id"])


def downgrade() -> None:
    op.drop_index("ix_code_archives_id", table_name="code_archives")
    op.drop_table("code_archives")
