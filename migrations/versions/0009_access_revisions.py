"""access revisions: a per-company counter raised with every change to what its agents can reach or find

Revision ID: 0009_access_revisions
Revises: 0008_catalog_search
"""

import sqlalchemy as sa
from alembic import op

revision = "0009_access_revisions"
down_revision = "0008_catalog_search"
branch_labels = None
depends_on = None


def upgrade():
    op.create_table(
        "access_revisions",
        sa.Column("company_id", sa.Uuid(), nullable=False),
        sa.Column("revision", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["company_id"],
            ["companies.id"],
            name=op.f("fk_access_revisions_company_id_companies"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("company_id", name=op.f("pk_access_revisions")),
    )
    op.execute("INSERT INTO access_revisions (company_id, revision) SELECT id, 0 FROM companies")


def downgrade():
    op.drop_table("access_revisions")
