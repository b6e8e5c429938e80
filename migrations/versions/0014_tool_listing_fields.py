"""tool listing fields: what a provider says about a tool beyond its name, description and input schema

Adds the nullable `connection_tools.listing` column: the provider's `title`, `outputSchema`, `annotations` and `_meta`
of the tool as last indexed, passed through in the gateway's `tools/list`. Rows indexed before it stay null (the
next tool refresh fills them).

Revision ID: 0014_tool_listing_fields
Revises: 0013_install_tool_scope
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = "0014_tool_listing_fields"
down_revision = "0013_install_tool_scope"
branch_labels = None
depends_on = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def upgrade():
    with op.batch_alter_table("connection_tools") as batch_op:
        batch_op.add_column(sa.Column("listing", JSON_TYPE, nullable=True))


def downgrade():
    with op.batch_alter_table("connection_tools") as batch_op:
        batch_op.drop_column("listing")
