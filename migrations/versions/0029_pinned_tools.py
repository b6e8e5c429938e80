"""Pinned tools: a tool an agent's listing names by itself even when the listing is the meta tools (issue 32)

Revision ID: 0029_pinned_tools
Revises: 0028_install_agreement
"""

from alembic import op
import sqlalchemy as sa

revision = "0029_pinned_tools"
down_revision = "0028_install_agreement"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # Plain ADD COLUMN on every backend: no table is copied.
    op.add_column(
        "tool_policies", sa.Column("pinned", sa.Boolean(), nullable=False, server_default=sa.text("false"))
    )


def downgrade() -> None:
    # A plain DROP COLUMN, also on SQLite (3.35+): batch mode would copy the table.
    if op.get_bind().dialect.name == "sqlite":
        op.execute("ALTER TABLE tool_policies DROP COLUMN pinned")
    else:
        op.drop_column("tool_policies", "pinned")
