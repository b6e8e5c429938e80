"""run hand-over: the person a live run acted for before its task changed responsible person

A run's token names the person it was minted for; when the task is handed to someone else, the live run acts for the
new person (`responsible_user_id`) and keeps accepting its token (`handed_over_from_user_id`).

Revision ID: 0010_run_handover
Revises: 0009_access_revisions
"""

import sqlalchemy as sa
from alembic import op

revision = "0010_run_handover"
down_revision = "0009_access_revisions"
branch_labels = None
depends_on = None


def upgrade():
    with op.batch_alter_table("heartbeat_runs") as batch:
        batch.add_column(sa.Column("handed_over_from_user_id", sa.Uuid(), nullable=True))
        batch.create_foreign_key(
            op.f("fk_heartbeat_runs_handed_over_from_user_id_users"),
            "users",
            ["handed_over_from_user_id"],
            ["id"],
            ondelete="SET NULL",
        )


def downgrade():
    with op.batch_alter_table("heartbeat_runs") as batch:
        batch.drop_constraint(op.f("fk_heartbeat_runs_handed_over_from_user_id_users"), type_="foreignkey")
        batch.drop_column("handed_over_from_user_id")
