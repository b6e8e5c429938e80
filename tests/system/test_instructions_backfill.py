"""The migration that adds agent instructions backfills only the five memory providers, only where null."""

import json
import uuid

import pytest
from flask_migrate import upgrade
from sqlalchemy import create_engine, text

from app import create_app
from tests.conftest import TEST_CONFIG, _database_url
from tests.paths import ROOT

DEFINITIONS = ROOT / "app" / "catalog" / "definitions"


@pytest.fixture
def fresh_database_url(tmp_path):
    base = _database_url()
    if not base.startswith("postgresql"):
        yield f"sqlite:///{tmp_path / 'backfill.db'}"
        return
    name = f"sb_backfill_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = base.rsplit("/", 1)[0] + "/" + name
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def test_backfill_only_memory_providers_where_null(fresh_database_url):
    app = create_app({**TEST_CONFIG, "SQLALCHEMY_DATABASE_URI": fresh_database_url})
    custom_text = {"enabled": True, "text": "Our own Honcho rules."}
    opt_out = {"enabled": False, "text": "Template text we turned off."}
    rows = {
        "honcho-null": ("honcho", None),
        "honcho-custom": ("honcho", custom_text),
        "honcho-off": ("honcho", opt_out),
        "mem0-null": ("mem0", None),
        "notion-null": ("notion", None),
        "custom-null": ("custom", None),
    }
    with app.app_context():
        from app.extensions import db

        upgrade(revision="0002_connections")
        company_id = uuid.uuid4().hex if db.engine.dialect.name == "sqlite" else str(uuid.uuid4())
        ids = {}
        with db.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO companies (id, name, issue_prefix, issue_counter, created_at, updated_at) "
                    "VALUES (:id, 'Old Co', 'OLD', 0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                ),
                {"id": company_id},
            )
            for name, (slug, _setting) in rows.items():
                ids[name] = uuid.uuid4().hex if db.engine.dialect.name == "sqlite" else str(uuid.uuid4())
                conn.execute(
                    text(
                        "INSERT INTO tool_connections (id, company_id, app_slug, name, status, enabled, "
                        "health_status, auth_kind, config, created_at, updated_at) VALUES (:id, :company, :slug, "
                        ":name, 'active', true, 'healthy', 'api_key', '{}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                    ),
                    {"id": ids[name], "company": company_id, "slug": slug, "name": name},
                )
        # Settings that existed before this revision cannot exist in the old schema; emulate a re-run instead:
        upgrade(revision="0003_agent_instructions")
        with db.engine.begin() as conn:
            for name in ("honcho-custom", "honcho-off"):
                conn.execute(
                    text("UPDATE tool_connections SET agent_instructions = :v WHERE id = :id"),
                    {"v": json.dumps(rows[name][1]), "id": ids[name]},
                )
            conn.execute(
                text("UPDATE tool_connections SET agent_instructions = NULL WHERE id = :id"),
                {"id": ids["honcho-null"]},
            )
        # Re-running the backfill (as the migration does) must not replace custom text or opt-outs.
        import importlib.util

        spec = importlib.util.spec_from_file_location(
            "backfill_migration",
            ROOT / "migrations" / "versions" / "0003_connection_agent_instructions.py",
        )
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        from alembic.migration import MigrationContext
        from alembic.operations import Operations

        with db.engine.begin() as conn:
            module.op = Operations(MigrationContext.configure(conn))
            module.backfill()
        with db.engine.connect() as conn:
            stored = {
                name: conn.execute(
                    text("SELECT agent_instructions FROM tool_connections WHERE id = :id"), {"id": ids[name]}
                ).scalar()
                for name in rows
            }
        upgrade()
    decoded = {k: (json.loads(v) if isinstance(v, str) else v) for k, v in stored.items()}
    honcho_template = json.loads((DEFINITIONS / "honcho.json").read_text())["agentInstructions"]
    mem0_template = json.loads((DEFINITIONS / "mem0.json").read_text())["agentInstructions"]
    assert decoded["honcho-null"] == {
        "enabled": True,
        "text": honcho_template["text"].strip(),
        "template": {"id": honcho_template["id"], "version": honcho_template["version"]},
    }
    assert decoded["mem0-null"]["template"] == {
        "id": mem0_template["id"],
        "version": mem0_template["version"],
    }
    assert decoded["honcho-custom"] == custom_text
    assert decoded["honcho-off"] == opt_out
    assert decoded["notion-null"] is None
    assert decoded["custom-null"] is None


def test_first_upgrade_backfills_existing_memory_connections(fresh_database_url):
    app = create_app({**TEST_CONFIG, "SQLALCHEMY_DATABASE_URI": fresh_database_url})
    with app.app_context():
        from app.extensions import db

        upgrade(revision="0002_connections")
        sqlite = db.engine.dialect.name == "sqlite"
        company_id, honcho_id, notion_id = (
            uuid.uuid4().hex if sqlite else str(uuid.uuid4()) for _ in range(3)
        )
        with db.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO companies (id, name, issue_prefix, issue_counter, created_at, updated_at) "
                    "VALUES (:id, 'Old Co', 'OLD', 0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                ),
                {"id": company_id},
            )
            for cid, slug in ((honcho_id, "honcho"), (notion_id, "notion")):
                conn.execute(
                    text(
                        "INSERT INTO tool_connections (id, company_id, app_slug, name, status, enabled, "
                        "health_status, auth_kind, config, created_at, updated_at) VALUES (:id, :company, :slug, "
                        ":slug, 'active', true, 'healthy', 'api_key', '{}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                    ),
                    {"id": cid, "company": company_id, "slug": slug},
                )
        upgrade()
        with db.engine.connect() as conn:
            honcho = conn.execute(
                text("SELECT agent_instructions FROM tool_connections WHERE id = :id"), {"id": honcho_id}
            ).scalar()
            notion = conn.execute(
                text("SELECT agent_instructions FROM tool_connections WHERE id = :id"), {"id": notion_id}
            ).scalar()
    honcho = json.loads(honcho) if isinstance(honcho, str) else honcho
    assert honcho["enabled"] is True and honcho["template"]["id"] == "honcho.usage"
    assert notion is None


def test_tool_search_words_are_backfilled_for_existing_connections(fresh_database_url):
    app = create_app({**TEST_CONFIG, "SQLALCHEMY_DATABASE_URI": fresh_database_url})
    with app.app_context():
        from app.extensions import db

        upgrade(revision="0006_runs")
        sqlite = db.engine.dialect.name == "sqlite"
        new_id = (lambda: uuid.uuid4().hex) if sqlite else (lambda: str(uuid.uuid4()))
        company_id, connection_id = new_id(), new_id()
        with db.engine.begin() as conn:
            conn.execute(
                text(
                    "INSERT INTO companies (id, name, issue_prefix, issue_counter, created_at, updated_at) "
                    "VALUES (:id, 'Old Co', 'OLD', 0, CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                ),
                {"id": company_id},
            )
            conn.execute(
                text(
                    "INSERT INTO tool_connections (id, company_id, app_slug, name, status, enabled, health_status, "
                    "auth_kind, config, created_at, updated_at) VALUES (:id, :company, 'custom', 'Notes', 'active', "
                    "true, 'healthy', 'api_key', '{}', CURRENT_TIMESTAMP, CURRENT_TIMESTAMP)"
                ),
                {"id": connection_id, "company": company_id},
            )
            for name, description, status in (
                ("search_notes", "Search Release notes", "active"),
                ("old_tool", "Gone", "removed"),
            ):
                conn.execute(
                    text(
                        "INSERT INTO connection_tools (id, company_id, connection_id, name, description, "
                        "input_schema, is_write, status, version_hash, first_seen_at, last_seen_at) VALUES (:id, "
                        ":company, :connection, :name, :description, '{}', false, :status, 'h', CURRENT_TIMESTAMP, "
                        "CURRENT_TIMESTAMP)"
                    ),
                    {
                        "id": new_id(),
                        "company": company_id,
                        "connection": connection_id,
                        "name": name,
                        "description": description,
                        "status": status,
                    },
                )
        upgrade()
        with db.engine.connect() as conn:
            words = conn.execute(
                text("SELECT tool_search_text FROM tool_connections WHERE id = :id"), {"id": connection_id}
            ).scalar()
    assert words == "notes release search"
