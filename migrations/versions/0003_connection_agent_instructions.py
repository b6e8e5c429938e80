"""connection agent instructions, backfilled for the five memory providers

Adds the nullable `tool_connections.agent_instructions` column and backfills it only for connections of the
participating memory providers, only where it is still null, with the provider template enabled. Template texts are
read from the app definitions shipped with this revision, so the migration needs no application imports.

Revision ID: 0003_agent_instructions
Revises: 0002_connections
"""

import json
from pathlib import Path

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0003_agent_instructions"
down_revision = "0002_connections"
branch_labels = None
depends_on = None

MEMORY_PROVIDERS = ("honcho", "mem0", "zep", "supermemory", "cognee")
DEFINITIONS = Path(__file__).resolve().parents[2] / "app" / "catalog" / "definitions"
JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(astext_type=sa.Text()), "postgresql")


def template_default(slug: str) -> dict | None:
    path = DEFINITIONS / f"{slug}.json"
    if not path.exists():
        return None
    template = json.loads(path.read_text(encoding="utf-8")).get("agentInstructions")
    if not template:
        return None
    return {
        "enabled": True,
        "text": template["text"].strip(),
        "template": {"id": template["id"], "version": template["version"]},
    }


def upgrade():
    with op.batch_alter_table("tool_connections", schema=None) as batch_op:
        batch_op.add_column(sa.Column("agent_instructions", JSON_TYPE, nullable=True))
    backfill()


def backfill():
    connections = sa.table(
        "tool_connections",
        sa.column("app_slug", sa.String),
        sa.column("agent_instructions", JSON_TYPE),
    )
    for slug in MEMORY_PROVIDERS:
        value = template_default(slug)
        if value is None:
            continue
        op.execute(
            connections.update()
            .where(connections.c.app_slug == slug, connections.c.agent_instructions.is_(None))
            .values(agent_instructions=value)
        )


def downgrade():
    with op.batch_alter_table("tool_connections", schema=None) as batch_op:
        batch_op.drop_column("agent_instructions")
