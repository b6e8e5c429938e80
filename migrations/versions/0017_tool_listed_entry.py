"""tool listed entry: each tool's gateway `tools/list` entry kept serialized

Adds the nullable `connection_tools.listed_entry` column: the tool's entry as JSON text without its name and
description (`stored_entry`, `app/services/connections/tool_index.py`), so a listing rebuild splices strings instead of decoding schemas.
Existing rows are backfilled here with the application's own `stored_entry` (the text must be exactly what the
gateway writes, so it is not restated here); a row left null, or stored in an older format, is listed the full way
until its tools are indexed again.

Revision ID: 0017_tool_listed_entry
Revises: 0016_gateway_run_state
"""

from alembic import op
import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

revision = "0017_tool_listed_entry"
down_revision = "0016_gateway_run_state"
branch_labels = None
depends_on = None

JSON_TYPE = sa.JSON(none_as_null=True).with_variant(
    postgresql.JSONB(none_as_null=True, astext_type=sa.Text()), "postgresql"
)
BATCH = 1000


def upgrade():
    with op.batch_alter_table("connection_tools") as batch_op:
        batch_op.add_column(sa.Column("listed_entry", sa.Text(), nullable=True))
    backfill()


def backfill():
    from app.services.connections.tool_index import stored_entry

    tools = sa.table(
        "connection_tools",
        sa.column("id", sa.Uuid()),
        sa.column("input_schema", JSON_TYPE),
        sa.column("is_write", sa.Boolean()),
        sa.column("listing", JSON_TYPE),
        sa.column("listed_entry", sa.Text()),
    )
    bind = op.get_bind()
    after = None
    while True:
        query = sa.select(tools.c.id, tools.c.input_schema, tools.c.is_write, tools.c.listing)
        if after is not None:
            query = query.where(tools.c.id > after)
        rows = bind.execute(query.order_by(tools.c.id).limit(BATCH)).all()
        if not rows:
            return
        bind.execute(
            tools.update().where(tools.c.id == sa.bindparam("row_id")),
            [
                {"row_id": row.id, "listed_entry": stored_entry(row.input_schema, bool(row.is_write), row.listing)}
                for row in rows
            ],
        )
        after = rows[-1].id


def downgrade():
    with op.batch_alter_table("connection_tools") as batch_op:
        batch_op.drop_column("listed_entry")
