"""connections keep the words of their indexed tools for search

Revision ID: 0007_tool_search_text
Revises: 0006_runs
"""

import re
from collections import defaultdict

import sqlalchemy as sa
from alembic import op

revision = "0007_tool_search_text"
down_revision = "0006_runs"
branch_labels = None
depends_on = None

WORD = re.compile(r"[^\W_]+")


def upgrade():
    with op.batch_alter_table("tool_connections", schema=None) as batch_op:
        batch_op.add_column(sa.Column("tool_search_text", sa.Text(), nullable=False, server_default=""))
    bind = op.get_bind()
    words: dict = defaultdict(set)
    rows = bind.execute(
        sa.text("SELECT connection_id, name, description FROM connection_tools WHERE status = 'active'")
    )
    for connection_id, name, description in rows:
        words[connection_id].update(WORD.findall(f"{name} {description or ''}".lower()))
    # Untyped id: the values go back exactly as the database returned them (hex text on SQLite, uuid on PostgreSQL).
    connections = sa.table("tool_connections", sa.column("id"), sa.column("tool_search_text", sa.Text))
    for connection_id, found in words.items():
        bind.execute(
            connections.update()
            .where(connections.c.id == connection_id)
            .values(tool_search_text=" ".join(sorted(found)))
        )


def downgrade():
    with op.batch_alter_table("tool_connections", schema=None) as batch_op:
        batch_op.drop_column("tool_search_text")
