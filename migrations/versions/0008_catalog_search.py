"""catalog rows keep what connections_search ranks on, so search reads them without decoding definitions

Revision ID: 0008_catalog_search
Revises: 0007_tool_search_text
"""

import json

import sqlalchemy as sa
from alembic import op

revision = "0008_catalog_search"
down_revision = "0007_tool_search_text"
branch_labels = None
depends_on = None


def _search_fields(definition: dict) -> dict:
    """This revision's copy of `app.catalog.loader.search_fields` (a migration must not change with the app)."""
    methods = definition.get("methods") or []
    guidance = " ".join(method.get("whenToUse") or "" for method in methods)
    words = [definition["slug"], definition["name"], definition.get("description") or "", guidance]
    return {
        "searchable": bool(methods) and definition["slug"] != "custom",
        "search_text": " ".join(words).lower(),
        "name_key": definition["name"].casefold(),
    }


def upgrade():
    with op.batch_alter_table("catalog_apps", schema=None) as batch_op:
        batch_op.add_column(sa.Column("searchable", sa.Boolean(), nullable=False, server_default=sa.text("false")))
        batch_op.add_column(sa.Column("search_text", sa.Text(), nullable=False, server_default=""))
        batch_op.add_column(sa.Column("name_key", sa.String(length=200), nullable=False, server_default=""))
    bind = op.get_bind()
    catalog = sa.table(
        "catalog_apps",
        sa.column("slug", sa.String),
        sa.column("searchable", sa.Boolean),
        sa.column("search_text", sa.Text),
        sa.column("name_key", sa.String),
    )
    for slug, definition in bind.execute(sa.text("SELECT slug, definition FROM catalog_apps")).all():
        if isinstance(definition, str):  # SQLite returns the JSON text
            definition = json.loads(definition)
        bind.execute(catalog.update().where(catalog.c.slug == slug).values(**_search_fields(definition)))


def downgrade():
    with op.batch_alter_table("catalog_apps", schema=None) as batch_op:
        batch_op.drop_column("name_key")
        batch_op.drop_column("search_text")
        batch_op.drop_column("searchable")
