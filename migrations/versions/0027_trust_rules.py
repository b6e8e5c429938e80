"""Trust rules ("Always allow" on a tool approval card), quarantined tool definitions, and the mark a provider's
`notifications/tools/list_changed` leaves on its connection (issue 28 items 1, 2)

Revision ID: 0027_trust_rules
Revises: 0026_assistants
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = "0027_trust_rules"
down_revision = "0026_assistants"
branch_labels = None
depends_on = None

# A new closed value set (tests/system/test_status_checks.py folds these over 0015's snapshot).
CHECK_CHANGES = {("tool_trust_rules", "scope"): ("task", "agent_connection")}

JSON_NULLABLE = sa.JSON(none_as_null=True).with_variant(postgresql.JSONB(none_as_null=True), "postgresql")


def _drop_column(table: str, column: str) -> None:
    """A plain DROP COLUMN, also on SQLite (3.35+): batch mode would copy the table, and dropping the old copy
    with foreign keys on deletes the rows that reference it (`connection_tools` rows cascade from a connection)."""
    if op.get_bind().dialect.name == "sqlite":
        op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")
    else:
        op.drop_column(table, column)


def upgrade() -> None:
    # Plain ADD COLUMN on every backend (nullable, no default): no table is copied.
    op.add_column("tool_connections", sa.Column("tools_changed_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("connection_tools", sa.Column("pending_definition", JSON_NULLABLE, nullable=True))
    op.create_table(
        "tool_trust_rules",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("connection_id", sa.Uuid(), nullable=False),
        sa.Column("tool_name", sa.String(length=200), nullable=False),
        sa.Column("definition_digest", sa.String(length=64), nullable=False),
        sa.Column("agent_id", sa.Uuid(), nullable=False),
        sa.Column("scope", sa.String(length=20), nullable=False),
        sa.Column("issue_id", sa.Uuid(), nullable=True),
        sa.Column("arguments_digest", sa.String(length=64), nullable=True),
        sa.Column("arguments", JSON_NULLABLE, nullable=True),
        sa.Column("expires_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("remaining_uses", sa.Integer(), nullable=True),
        sa.Column("uses", sa.Integer(), nullable=False),
        sa.Column("created_by_user_id", sa.Uuid(), nullable=True),
        sa.Column("source_interaction_id", sa.Uuid(), nullable=True),
        sa.Column("revoked_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("revoked_by_user_id", sa.Uuid(), nullable=True),
        sa.Column("voided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("void_reason", sa.String(length=40), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.CheckConstraint(
            "scope IN ('task', 'agent_connection')", name=op.f("ck_tool_trust_rules_scope")
        ),
        sa.ForeignKeyConstraint(
            ["company_id"], ["companies.id"], name=op.f("fk_tool_trust_rules_company_id_companies"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["connection_id"], ["tool_connections.id"],
            name=op.f("fk_tool_trust_rules_connection_id_tool_connections"), ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["agents.id"], name=op.f("fk_tool_trust_rules_agent_id_agents"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["issue_id"], ["issues.id"], name=op.f("fk_tool_trust_rules_issue_id_issues"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["created_by_user_id"], ["users.id"], name=op.f("fk_tool_trust_rules_created_by_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["revoked_by_user_id"], ["users.id"], name=op.f("fk_tool_trust_rules_revoked_by_user_id_users"),
            ondelete="SET NULL",
        ),
        sa.ForeignKeyConstraint(
            ["source_interaction_id"], ["thread_interactions.id"],
            name=op.f("fk_tool_trust_rules_source_interaction_id_thread_interactions"), ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_tool_trust_rules")),
    )
    op.create_index(
        "ix_tool_trust_rules_lookup", "tool_trust_rules", ["connection_id", "tool_name", "agent_id"]
    )


def downgrade() -> None:
    op.drop_index("ix_tool_trust_rules_lookup", table_name="tool_trust_rules")
    op.drop_table("tool_trust_rules")
    _drop_column("connection_tools", "pending_definition")
    _drop_column("tool_connections", "tools_changed_at")
