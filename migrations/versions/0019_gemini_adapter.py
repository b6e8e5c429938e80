"""gemini adapter: agents may run Gemini CLI

- `agents.adapter_type` also accepts `gemini` (the check constraint is recreated).

Revision ID: 0019_gemini_adapter
Revises: 0018_agent_cli_adapters
"""

from alembic import op

revision = "0019_gemini_adapter"
down_revision = "0018_agent_cli_adapters"
branch_labels = None
depends_on = None

BEFORE = ("process", "http", "claude_code", "codex", "manual")
AFTER = ("process", "http", "claude_code", "codex", "gemini", "manual")


def _adapter_check(values: tuple[str, ...]) -> None:
    with op.batch_alter_table("agents") as batch_op:
        batch_op.drop_constraint(op.f("ck_agents_adapter_type"), type_="check")
        batch_op.create_check_constraint(
            op.f("ck_agents_adapter_type"), f"adapter_type IN ({', '.join(repr(v) for v in values)})"
        )


def upgrade():
    _adapter_check(AFTER)


def downgrade():
    op.execute("DELETE FROM agents WHERE adapter_type = 'gemini'")
    _adapter_check(BEFORE)
