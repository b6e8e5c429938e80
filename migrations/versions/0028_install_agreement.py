"""What every instance of one installation must agree on: fingerprints of its keys (never the keys), and every set of
app definitions the catalog was ingested from (so a starting process never turns the catalog back to older ones)

Revision ID: 0028_install_agreement
Revises: 0027_trust_rules
"""

from alembic import op
import sqlalchemy as sa

revision = "0028_install_agreement"
down_revision = "0027_trust_rules"
branch_labels = None
depends_on = None


def upgrade() -> None:
    # New tables only (an expand step): the previous release's code never reads them.
    op.create_table(
        "installation_settings",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("fingerprints", sa.Text(), nullable=False),
        sa.Column("recorded_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_installation_settings")),
    )
    op.create_table(
        "catalog_ingests",
        sa.Column("definitions_hash", sa.String(length=64), nullable=False),
        sa.Column("ingested_at", sa.DateTime(timezone=True), nullable=False),
        sa.PrimaryKeyConstraint("definitions_hash", name=op.f("pk_catalog_ingests")),
    )
    # The catalog in the database now was ingested from these definitions: a process that still ships them is older.
    op.execute(
        "INSERT INTO catalog_ingests (definitions_hash, ingested_at) "
        "SELECT definitions_hash, COALESCE(ingested_at, CURRENT_TIMESTAMP) FROM catalog_state "
        "WHERE definitions_hash <> ''"
    )


def downgrade() -> None:
    op.drop_table("catalog_ingests")
    op.drop_table("installation_settings")
