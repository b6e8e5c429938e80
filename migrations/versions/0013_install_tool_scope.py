"""install tool scope: an agent install granted by an access card covers only the tools it names

Revision ID: 0013_install_tool_scope
Revises: 0012_notifications
"""

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0013_install_tool_scope"
down_revision = "0012_notifications"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("connection_installs") as batch:
        batch.add_column(sa.Column("tool_scope", sa.JSON().with_variant(postgresql.JSONB(), "postgresql"), nullable=True))


def downgrade():
    with op.batch_alter_table("connection_installs") as batch:
        batch.drop_column("tool_scope")
