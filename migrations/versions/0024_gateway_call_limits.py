"""Gateway call limits (issue 28 item 3): tool_connections.call_limits and the call counters every server process
shares

Revision ID: 0024_gateway_call_limits
Revises: 0023_drop_run_elicitation
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = "0024_gateway_call_limits"
down_revision = "0023_drop_run_elicitation"
branch_labels = None
depends_on = None


# Plain ALTER TABLE, never batch mode: on SQLite a batch copies `tool_connections`, and dropping the old copy with
# foreign keys on deletes every row that cascades from it (its tools, identities, policies).


def upgrade() -> None:
    op.add_column(
        "tool_connections",
        sa.Column(
            "call_limits",
            sa.JSON(none_as_null=True).with_variant(
                postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), "postgresql"
            ),
            nullable=True,
        ),
    )
    op.create_table(
        "gateway_call_counters",
        sa.Column("key", sa.String(length=64), nullable=False),
        sa.Column("connection_id", sa.Uuid(), nullable=False),
        sa.Column("expires_at", sa.Integer(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["connection_id"],
            ["tool_connections.id"],
            name=op.f("fk_gateway_call_counters_connection_id_tool_connections"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("key", name=op.f("pk_gateway_call_counters")),
    )
    op.create_index(
        "ix_gateway_call_counters_connection_expires",
        "gateway_call_counters",
        ["connection_id", "expires_at"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index("ix_gateway_call_counters_connection_expires", table_name="gateway_call_counters")
    op.drop_table("gateway_call_counters")
    op.drop_column("tool_connections", "call_limits")
