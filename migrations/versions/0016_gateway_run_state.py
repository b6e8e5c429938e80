"""gateway cancellations and elicitation: state the stateless gateway keeps per run

Adds `gateway_cancellations` (run, the agent's request id as JSON text, when): a cancellation that lands in another
server process than the gateway call it names is recorded here, and the call's process polls for it. Adds the
nullable `heartbeat_runs.gateway_elicitation`: the elicitation modes the run's gateway client declared at its last
`initialize`.

Revision ID: 0016_gateway_run_state
Revises: 0015_status_checks
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = "0016_gateway_run_state"
down_revision = "0015_status_checks"
branch_labels = None
depends_on = None


JSON_TYPE = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), "postgresql"
)


def upgrade():
    with op.batch_alter_table("heartbeat_runs") as batch_op:
        batch_op.add_column(sa.Column("gateway_elicitation", JSON_TYPE, nullable=True))
    op.create_table(
        "gateway_cancellations",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("request_key", sa.String(length=200), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["heartbeat_runs.id"],
            name=op.f("fk_gateway_cancellations_run_id_heartbeat_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_gateway_cancellations")),
    )
    op.create_index(
        "ix_gateway_cancellations_run_request", "gateway_cancellations", ["run_id", "request_key"]
    )
    op.create_index(
        op.f("ix_gateway_cancellations_created_at"), "gateway_cancellations", ["created_at"]
    )


def downgrade():
    op.drop_index(op.f("ix_gateway_cancellations_created_at"), table_name="gateway_cancellations")
    op.drop_index("ix_gateway_cancellations_run_request", table_name="gateway_cancellations")
    op.drop_table("gateway_cancellations")
    with op.batch_alter_table("heartbeat_runs") as batch_op:
        batch_op.drop_column("gateway_elicitation")
