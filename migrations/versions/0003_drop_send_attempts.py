"""dispatch_intents.send_attempts: written as 0 and never read

Revision ID: 0003
Revises: 0002
"""

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("dispatch_intents") as batch:
        batch.drop_column("send_attempts")


def downgrade() -> None:
    with op.batch_alter_table("dispatch_intents") as batch:
        batch.add_column(sa.Column("send_attempts", sa.Integer(), nullable=False, server_default="0"))
