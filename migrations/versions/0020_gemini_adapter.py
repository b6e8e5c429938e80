"""gemini adapter: agents may run Gemini CLI

- `agents.adapter_type` also accepts `gemini` (the check constraint is recreated).

Revision ID: 0020_gemini_adapter
Revises: 0019_card_keys
"""

from alembic import op

revision = "0020_gemini_adapter"
down_revision = "0019_card_keys"
branch_labels = None
depends_on = None

BEFORE = ("process", "http", "claude_code", "codex", "manual")
AFTER = ("process", "http", "claude_code", "codex", "gemini", "manual")
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


def downgrade():
    op.execute("DELETE FROM agents WHERE adapter_type = 'gemini'")
    _adapter_check(BEFORE)
