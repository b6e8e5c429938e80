"""connection intents: the continuation outbox

Adds `connection_intent_deliveries`, one content-free row per resolved connection card (connected or declined),
written in the same transaction as the resolution and consumed by the continuation worker.

Revision ID: 0004_connection_intents
Revises: 0003_agent_instructions
"""

import sqlalchemy as sa
from alembic import op

revision = "0004_connection_intents"
down_revision = "0003_agent_instructions"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "connection_intent_deliveries",
        sa.Column("interaction_id", sa.Uuid(), nullable=False),
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["company_id"],
            ["companies.id"],
            name=op.f("fk_connection_intent_deliveries_company_id_companies"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["interaction_id"],
            ["thread_interactions.id"],
            name=op.f("fk_connection_intent_deliveries_interaction_id_thread_interactions"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("interaction_id", name=op.f("pk_connection_intent_deliveries")),
    )
    with op.batch_alter_table("connection_intent_deliveries", schema=None) as batch_op:
        batch_op.create_index(
            "ix_connection_intent_deliveries_pending", ["delivered_at", "next_attempt_at"], unique=False
        )


def downgrade():
    with op.batch_alter_table("connection_intent_deliveries", schema=None) as batch_op:
        batch_op.drop_index("ix_connection_intent_deliveries_pending")
    op.drop_table("connection_intent_deliveries")
