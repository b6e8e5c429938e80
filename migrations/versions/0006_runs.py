"""runs: bounded run logs and per-task agent sessions

Adds `run_logs` (the tail of a run's stdout/stderr or HTTP response, the session it resumed and reported, and the
instruction digest of the turn) and `agent_task_sessions` (the adapter session an agent keeps on a task, with the
instruction digest it was created under).

Revision ID: 0006_runs
Revises: 0005_oauth
"""

import sqlalchemy as sa
from alembic import op

revision = "0006_runs"
down_revision = "0005_oauth"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "run_logs",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("adapter_type", sa.String(length=20), nullable=False),
        sa.Column("exit_code", sa.Integer(), nullable=True),
        sa.Column("http_status", sa.Integer(), nullable=True),
        sa.Column("stdout", sa.Text(), nullable=False),
        sa.Column("stderr", sa.Text(), nullable=False),
        sa.Column("truncated", sa.Boolean(), nullable=False),
        sa.Column("timed_out", sa.Boolean(), nullable=False),
        sa.Column("resumed_session_id", sa.String(length=300), nullable=True),
        sa.Column("session_id", sa.String(length=300), nullable=True),
        sa.Column("instructions_digest", sa.String(length=64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["company_id"],
            ["companies.id"],
            name=op.f("fk_run_logs_company_id_companies"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["heartbeat_runs.id"],
            name=op.f("fk_run_logs_run_id_heartbeat_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("run_id", name=op.f("pk_run_logs")),
    )
    with op.batch_alter_table("run_logs", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_run_logs_company_id"), ["company_id"], unique=False)

    op.create_table(
        "agent_task_sessions",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("agent_id", sa.Uuid(), nullable=False),
        sa.Column("issue_id", sa.Uuid(), nullable=False),
        sa.Column("session_id", sa.String(length=300), nullable=True),
        sa.Column("instructions_digest", sa.String(length=64), nullable=True),
        sa.Column("last_run_id", sa.Uuid(), nullable=True),
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["agent_id"],
            ["agents.id"],
            name=op.f("fk_agent_task_sessions_agent_id_agents"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["company_id"],
            ["companies.id"],
            name=op.f("fk_agent_task_sessions_company_id_companies"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["issue_id"],
            ["issues.id"],
            name=op.f("fk_agent_task_sessions_issue_id_issues"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["last_run_id"],
            ["heartbeat_runs.id"],
            name=op.f("fk_agent_task_sessions_last_run_id_heartbeat_runs"),
            ondelete="SET NULL",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_agent_task_sessions")),
        sa.UniqueConstraint("agent_id", "issue_id", name=op.f("uq_agent_task_sessions_agent_id_issue_id")),
    )
    with op.batch_alter_table("agent_task_sessions", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_agent_task_sessions_issue_id"), ["issue_id"], unique=False)


def downgrade():
    with op.batch_alter_table("agent_task_sessions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_agent_task_sessions_issue_id"))
    op.drop_table("agent_task_sessions")
    with op.batch_alter_table("run_logs", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_run_logs_company_id"))
    op.drop_table("run_logs")
