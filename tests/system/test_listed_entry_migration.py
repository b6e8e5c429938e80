"""Migration 0017 backfills every existing tool's stored listing entry, as the ORM would have written it."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime

import sqlalchemy as sa

from app.models.base import JSONType, NullableJSONType
from app.services.connections.tool_index import ENTRY_FORMAT, stored_entry
from tests.system.test_migrations import app_on, fresh_database

BEFORE = "0016_gateway_run_state"
SCHEMA = {"type": "object", "properties": {"q": {"type": "string", "description": "ünï 🚀"}}}
TOOLS = {  # name: (input schema, is_write, listing)
    "plain": (SCHEMA, False, None),
    "empty_schema": ({}, True, None),
    "described": (SCHEMA, True, {"title": "Tïtle", "annotations": {"readOnlyHint": True}, "_meta": {"a": 1}}),
    "invalid": (SCHEMA, False, {"annotations": {"readOnlyHint": "maybe"}}),
}

companies = sa.table(
    "companies",
    sa.column("id", sa.Uuid()),
    sa.column("name", sa.String()),
    sa.column("issue_prefix", sa.String()),
    sa.column("issue_counter", sa.Integer()),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("updated_at", sa.DateTime(timezone=True)),
)
connections = sa.table(
    "tool_connections",
    *(sa.column(name, sa.String()) for name in ("app_slug", "name", "status", "health_status", "auth_kind")),
    sa.column("id", sa.Uuid()),
    sa.column("company_id", sa.Uuid()),
    sa.column("enabled", sa.Boolean()),
    sa.column("config", JSONType),
    sa.column("created_at", sa.DateTime(timezone=True)),
    sa.column("updated_at", sa.DateTime(timezone=True)),
)
tools = sa.table(
    "connection_tools",
    sa.column("id", sa.Uuid()),
    sa.column("company_id", sa.Uuid()),
    sa.column("connection_id", sa.Uuid()),
    *(sa.column(name, sa.String()) for name in ("name", "description", "status", "version_hash")),
    sa.column("input_schema", JSONType),
    sa.column("is_write", sa.Boolean()),
    sa.column("listing", NullableJSONType),
    sa.column("first_seen_at", sa.DateTime(timezone=True)),
    sa.column("last_seen_at", sa.DateTime(timezone=True)),
)


def stored(engine) -> dict[str, str | None]:
    with engine.connect() as conn:
        return dict(conn.execute(sa.text("SELECT name, listed_entry FROM connection_tools")).all())


def test_upgrade_backfills_stored_entries_and_downgrade_drops_them(tmp_path):
    from flask_migrate import downgrade, upgrade

    from app.extensions import db

    with fresh_database(tmp_path) as url, app_on(url):
        upgrade(revision=BEFORE)
        now = datetime.now(UTC)
        company_id, connection_id = uuid.uuid4(), uuid.uuid4()
        with db.engine.begin() as conn:
            conn.execute(
                companies.insert().values(
                    id=company_id,
                    name="Old Co",
                    issue_prefix="OLD",
                    issue_counter=0,
                    created_at=now,
                    updated_at=now,
                )
            )
            conn.execute(
                connections.insert().values(
                    id=connection_id,
                    company_id=company_id,
                    app_slug="custom",
                    name="Old connection",
                    status="active",
                    enabled=True,
                    health_status="healthy",
                    auth_kind="api_key",
                    config={},
                    created_at=now,
                    updated_at=now,
                )
            )
            for name, (schema, is_write, listing) in TOOLS.items():
                conn.execute(
                    tools.insert().values(
                        id=uuid.uuid4(),
                        company_id=company_id,
                        connection_id=connection_id,
                        name=name,
                        description=f"The {name} tool.",
                        status="active",
                        version_hash="v1",
                        input_schema=schema,
                        is_write=is_write,
                        listing=listing,
                        first_seen_at=now,
                        last_seen_at=now,
                    )
                )

        upgrade()
        expected = {name: stored_entry(*spec) for name, spec in TOOLS.items()}
        assert stored(db.engine) == expected
        assert expected["invalid"] is None  # listed the full way (and failing as it did before)
        assert all(expected[name].startswith(ENTRY_FORMAT) for name in ("plain", "empty_schema", "described"))

        downgrade(revision=BEFORE)
        assert "listed_entry" not in {
            c["name"] for c in sa.inspect(db.engine).get_columns("connection_tools")
        }
        upgrade()
        assert stored(db.engine) == expected
