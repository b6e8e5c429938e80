"""agent cli adapters: Claude Code and Codex adapter types, agent secrets, and the events an agent CLI reports

- `agents.adapter_type` also accepts `claude_code` and `codex` (the check constraint is recreated).
- `agent_secrets`: environment variables handed only to one agent's runs (a model API key), encrypted at rest.
- `run_logs.events` and `run_logs.summary`: the bounded, normalized events of an agent CLI's machine-readable output.

Revision ID: 0018_agent_cli_adapters
Revises: 0017_tool_listed_entry
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = "0018_agent_cli_adapters"
down_revision = "0017_tool_listed_entry"
branch_labels = None
depends_on = None

JSON_TYPE = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), "postgresql"
)
BEFORE = ("process", "http", "manual")
AFTER = ("process", "http", "claude_code", "codex", "manual")
# The value sets this revision changes (tests/system/test_status_checks.py folds them over 0015's snapshot).
CHECK_CHANGES = {("agents", "adapter_type"): AFTER}


def _adapter_check(values: tuple[str, ...]) -> None:
    with op.batch_alter_table("agents") as batch_op:
        batch_op.drop_constraint(op.f("ck_agents_adapter_type"), type_="check")
        batch_op.create_check_constraint(
            op.f("ck_agents_adapter_type"), f"adapter_type IN ({', '.join(repr(v) for v in values)})"
        )


def upgrade():
    _adapter_check(AFTER)
    op.create_table(
        "agent_secrets",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("agent_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(length=120), nullable=False),
        sa.Column("ciphertext", sa.Text(), nullable=False),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"], ["agents.id"], name=op.f("fk_agent_secrets_agent_id_agents"), ondelete="CASCADE"
        ),
        sa.ForeignKeyConstraint(
            ["company_id"], ["companies.id"], name=op.f("fk_agent_secrets_company_id_companies"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_secrets")),
        sa.UniqueConstraint("agent_id", "name", name=op.f("uq_agent_secrets_agent_id_name")),
    )
    with op.batch_alter_table("agent_secrets") as batch_op:
        batch_op.create_index(batch_op.f("ix_agent_secrets_company_id"), ["company_id"], unique=False)
    with op.batch_alter_table("run_logs") as batch_op:
        batch_op.add_column(sa.Column("events", JSON_TYPE, nullable=True))
        batch_op.add_column(sa.Column("summary", JSON_TYPE, nullable=True))


def downgrade():
    with op.batch_alter_table("run_logs") as batch_op:
        batch_op.drop_column("summary")
        batch_op.drop_column("events")
    with op.batch_alter_table("agent_secrets") as batch_op:
        batch_op.drop_index(batch_op.f("ix_agent_secrets_company_id"))
    op.drop_table("agent_secrets")
    op.execute("DELETE FROM agents WHERE adapter_type IN ('claude_code', 'codex')")
    _adapter_check(BEFORE)
