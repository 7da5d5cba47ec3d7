"""checkpoints.objective: the spec's objective at the checkpoint's epoch (null inside an epoch)

Revision ID: 0011
Revises: 0010
"""

import sqlalchemy as sa
from alembic import op

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("checkpoints", sa.Column("objective", sa.Float(), nullable=True))


def downgrade() -> None:
    op.drop_column("checkpoints", "objective")
