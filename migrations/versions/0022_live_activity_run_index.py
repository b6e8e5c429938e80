"""activity_log.run_id indexed: the task thread's tag counts the gateway calls of the task's runs on every poll
(issue 27: the thread shows the agent working), and the run's calls are read by run

Revision ID: 0022_live_activity_run_index
Revises: 0021_session_epoch
"""

from alembic import op

revision = "0022_live_activity_run_index"
down_revision = "0021_session_epoch"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_index("ix_activity_log_run", "activity_log", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_activity_log_run", table_name="activity_log")
