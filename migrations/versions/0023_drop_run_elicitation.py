"""heartbeat_runs.gateway_elicitation dropped: what a gateway client declared at `initialize` is its own, carried by
its session id (`app.web.agents.sessions`), not remembered per run (issue 34 item 3)

Revision ID: 0023_drop_run_elicitation
Revises: 0022_live_activity_run_index
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = "0023_drop_run_elicitation"
down_revision = "0022_live_activity_run_index"
branch_labels = None
depends_on = None

JSON_TYPE = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), "postgresql"
)


# Plain ALTER TABLE, never batch mode: on SQLite a batch copies `heartbeat_runs`, and dropping the old copy with
# foreign keys on deletes every row that cascades from it (run logs, sessions).


def upgrade() -> None:
    op.drop_column("heartbeat_runs", "gateway_elicitation")


def downgrade() -> None:
    op.add_column("heartbeat_runs", sa.Column("gateway_elicitation", JSON_TYPE, nullable=True))
