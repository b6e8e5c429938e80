"""catalog state: the fingerprint of the definitions the cached catalog came from, so app start ingests only changes

Revision ID: 0011_catalog_state
Revises: 0010_run_handover
"""

import sqlalchemy as sa
from alembic import op

revision = "0011_catalog_state"
down_revision = "0010_run_handover"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "catalog_state",
        sa.Column("id", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("definitions_hash", sa.String(length=64), server_default="", nullable=False),
        sa.Column("ingest_count", sa.Integer(), server_default="0", nullable=False),
        sa.Column("ingested_at", sa.DateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_catalog_state")),
    )
    # The one row exists from the start: app start and ingest lock it instead of racing to insert it.
    op.execute("INSERT INTO catalog_state (id, definitions_hash, ingest_count) VALUES (1, '', 0)")


def downgrade():
    op.drop_table("catalog_state")
