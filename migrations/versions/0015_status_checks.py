"""status checks: the closed value sets of statuses and kinds become CHECK constraints

Each column below held one of a fixed set of values only because the code wrote no other; the database now refuses
any other value (the sets are the `ValueSet` enums in `app/models/`). Every value the code writes, and every default,
is in its set, so existing rows satisfy the constraints. On SQLite the tables are rebuilt in batch mode (indexes,
partial ones included, are recreated from the reflected table).

Revision ID: 0015_status_checks
Revises: 0014_tool_listing_fields
"""

from alembic import op

revision = "0015_status_checks"
down_revision = "0014_tool_listing_fields"
branch_labels = None
depends_on = None

# A snapshot of the sets as this revision makes them (a later change of a set is a migration of its own).
CHECKS = {
    "activity_log": {"actor_type": ("user", "agent", "system")},
    "agents": {
        "adapter_type": ("process", "http", "manual"),
        "status": ("active", "paused", "archived"),
    },
    "issues": {"status": ("todo", "in_progress", "in_review", "blocked", "done", "cancelled")},
    "memberships": {
        "role": ("owner", "admin", "member", "viewer"),
        "status": ("active", "suspended"),
    },
    "heartbeat_runs": {"status": ("queued", "running", "succeeded", "failed", "cancelled")},
    "wakeup_requests": {"status": ("queued", "claimed", "finished", "skipped", "failed", "cancelled")},
    "tool_connections": {
        "status": ("draft", "active", "disconnected", "archived"),
        "auth_kind": ("oauth", "api_key", "none"),
    },
    "connection_grants": {
        "kind": ("organization", "user", "agent"),
        "status": ("active", "revoked", "expired", "needs_reauthorization"),
    },
    "connection_installs": {"target_type": ("company", "agent")},
    "tool_policies": {"action": ("allow", "ask_first", "block")},
}


def _condition(column: str, values: tuple[str, ...]) -> str:
    return f"{column} IN ({', '.join(repr(value) for value in values)})"


def upgrade():
    for table, columns in CHECKS.items():
        with op.batch_alter_table(table) as batch_op:
            for column, values in columns.items():
                batch_op.create_check_constraint(op.f(f"ck_{table}_{column}"), _condition(column, values))


def downgrade():
    for table, columns in reversed(list(CHECKS.items())):
        with op.batch_alter_table(table) as batch_op:
            for column in reversed(list(columns)):
                batch_op.drop_constraint(op.f(f"ck_{table}_{column}"), type_="check")
