"""Migrations on a fresh database of the backend under test: up to head, down to base, up again; the partial unique
indexes that carry idempotency exist after the migrations and really enforce it."""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

from app.models import Agent, Company, Issue, ThreadInteraction, WakeupRequest
from tests.conftest import TEST_CONFIG, TEST_DATABASE_URL, backend_name

PARTIAL_INDEXES = {
    "thread_interactions": "uq_thread_interactions_pending_idempotency",
    "wakeup_requests": "uq_wakeup_requests_connection_intent_idempotency",
}
CORE_TABLES = {
    "users",
    "companies",
    "memberships",
    "api_keys",
    "login_failures",
    "agents",
    "projects",
    "issues",
    "comments",
    "thread_interactions",
    "heartbeat_runs",
    "wakeup_requests",
    "activity_log",
    "tool_connections",
    "connection_grants",
    "catalog_apps",
}


@contextmanager
def fresh_database(directory: Path):
    """A brand-new, empty database on the backend under test; dropped afterwards."""
    if backend_name() == "sqlite":
        yield f"sqlite:///{directory / f'fresh-{uuid.uuid4().hex[:8]}.db'}"
        return
    server = make_url(TEST_DATABASE_URL).set(drivername="postgresql+psycopg")
    name = f"sb_migrations_{uuid.uuid4().hex[:12]}"
    admin = create_engine(server.set(database="postgres"), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    try:
        yield server.set(database=name).render_as_string(hide_password=False)
    finally:
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        admin.dispose()


@contextmanager
def app_on(url: str):
    """An app bound to `url`, with its app context pushed."""
    from app import create_app
    from app.extensions import db

    application = create_app({**TEST_CONFIG, "SQLALCHEMY_DATABASE_URI": url})
    ctx = application.app_context()
    ctx.push()
    try:
        yield application
    finally:
        db.session.remove()
        db.engine.dispose()
        ctx.pop()


@pytest.fixture
def fresh_app(tmp_path):
    with fresh_database(tmp_path) as url, app_on(url) as application:
        yield application


def table_names(engine) -> set[str]:
    return set(inspect(engine).get_table_names())


def index_definition(engine, name: str) -> str | None:
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            return conn.scalar(text("SELECT indexdef FROM pg_indexes WHERE indexname = :n"), {"n": name})
        return conn.scalar(
            text("SELECT sql FROM sqlite_master WHERE type = 'index' AND name = :n"), {"n": name}
        )


def current_revision(engine) -> str | None:
    with engine.connect() as conn:
        return conn.scalar(text("SELECT version_num FROM alembic_version"))


def test_upgrade_downgrade_upgrade_on_a_fresh_database(fresh_app):
    from flask_migrate import downgrade, upgrade

    from app.extensions import db

    engine = db.engine
    assert table_names(engine) == set()

    upgrade()
    tables = table_names(engine)
    assert tables >= CORE_TABLES
    head = current_revision(engine)
    assert head is not None
    for name in PARTIAL_INDEXES.values():
        definition = index_definition(engine, name)
        assert definition is not None, f"{name} is missing"
        assert "UNIQUE" in definition.upper()
        assert "WHERE" in definition.upper()

    downgrade(revision="base")
    assert table_names(engine) <= {"alembic_version"}
    assert current_revision(engine) is None
    for name in PARTIAL_INDEXES.values():
        assert index_definition(engine, name) is None

    upgrade()
    assert table_names(engine) == tables
    assert current_revision(engine) == head


def test_head_matches_the_models(migrated_database):
    """Autogenerate against the migrated database finds nothing to do: models and migrations agree."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    from app.extensions import db

    engine, _ids = migrated_database
    with engine.connect() as conn:
        context = MigrationContext.configure(conn, opts={"compare_type": False})
        diff = compare_metadata(context, db.metadata)
    assert diff == [], "models and migrations disagree:\n" + "\n".join(map(str, diff))


def seed(engine) -> dict:
    company_id = uuid.uuid4()
    other_company_id = uuid.uuid4()
    with engine.begin() as conn:
        for cid, prefix in ((company_id, "A"), (other_company_id, "B")):
            conn.execute(
                Company.__table__.insert().values(id=cid, name=f"Company {prefix}", issue_prefix=prefix)
            )
        agent_id = uuid.uuid4()
        other_agent_id = uuid.uuid4()
        conn.execute(Agent.__table__.insert().values(id=agent_id, company_id=company_id, name="Builder"))
        conn.execute(
            Agent.__table__.insert().values(id=other_agent_id, company_id=other_company_id, name="B")
        )
        issue_id = uuid.uuid4()
        conn.execute(
            Issue.__table__.insert().values(id=issue_id, company_id=company_id, identifier="A-1", title="T")
        )
    return {
        "company": company_id,
        "agent": agent_id,
        "other_company": other_company_id,
        "other_agent": other_agent_id,
        "issue": issue_id,
    }


def insert_wakeup(engine, ids, key: str | None, status: str, *, other_company: bool = False):
    company = ids["other_company"] if other_company else ids["company"]
    agent = ids["other_agent"] if other_company else ids["agent"]
    with engine.begin() as conn:
        conn.execute(
            WakeupRequest.__table__.insert().values(
                company_id=company, agent_id=agent, source="continuation", idempotency_key=key, status=status
            )
        )


def insert_interaction(engine, ids, key: str | None, status: str):
    with engine.begin() as conn:
        conn.execute(
            ThreadInteraction.__table__.insert().values(
                company_id=ids["company"],
                issue_id=ids["issue"],
                kind="connection_intent",
                idempotency_key=key,
                status=status,
            )
        )


LIVE = ("queued", "claimed", "finished")
ENDED = ("skipped", "failed", "cancelled")


@pytest.fixture(scope="module")
def migrated_database(tmp_path_factory):
    """One database migrated to head for the constraint tests (migrating a fresh one per test is slow on PostgreSQL)."""
    from flask_migrate import upgrade

    from app.extensions import db

    with fresh_database(tmp_path_factory.mktemp("migrated")) as url, app_on(url):
        upgrade()
        engine = db.engine
        yield engine, seed(engine)


@pytest.fixture
def migrated(migrated_database):
    engine, ids = migrated_database
    yield engine, ids
    with engine.begin() as conn:
        conn.execute(WakeupRequest.__table__.delete())
        conn.execute(ThreadInteraction.__table__.delete())


@pytest.mark.parametrize("first", LIVE)
@pytest.mark.parametrize("second", LIVE)
def test_two_live_connection_intent_wakeups_with_one_key_conflict(migrated, first, second):
    engine, ids = migrated
    insert_wakeup(engine, ids, "connection-intent:abc", first)
    with pytest.raises(IntegrityError):
        insert_wakeup(engine, ids, "connection-intent:abc", second)


@pytest.mark.parametrize("ended", ENDED)
def test_an_ended_wakeup_does_not_block_a_live_one(migrated, ended):
    engine, ids = migrated
    insert_wakeup(engine, ids, "connection-intent:abc", ended)
    insert_wakeup(engine, ids, "connection-intent:abc", ended)
    insert_wakeup(engine, ids, "connection-intent:abc", "queued")
    # ... but the live one still blocks a second live one.
    with pytest.raises(IntegrityError):
        insert_wakeup(engine, ids, "connection-intent:abc", "queued")


def test_other_keys_and_other_companies_are_not_constrained(migrated):
    engine, ids = migrated
    insert_wakeup(engine, ids, "manual:1", "queued")
    insert_wakeup(engine, ids, "manual:1", "queued")
    insert_wakeup(engine, ids, None, "queued")
    insert_wakeup(engine, ids, None, "queued")
    insert_wakeup(engine, ids, "connection-intent:abc", "queued")
    insert_wakeup(engine, ids, "connection-intent:abc", "queued", other_company=True)
    insert_wakeup(engine, ids, "connection-intent:xyz", "queued")


def test_reviving_an_ended_wakeup_conflicts_with_the_live_one(migrated):
    engine, ids = migrated
    insert_wakeup(engine, ids, "connection-intent:abc", "failed")
    insert_wakeup(engine, ids, "connection-intent:abc", "queued")
    table = WakeupRequest.__table__
    with pytest.raises(IntegrityError), engine.begin() as conn:
        conn.execute(table.update().where(table.c.status == "failed").values(status="queued"))


def test_two_pending_interactions_with_one_key_conflict(migrated):
    engine, ids = migrated
    insert_interaction(engine, ids, "intent:1", "pending")
    with pytest.raises(IntegrityError):
        insert_interaction(engine, ids, "intent:1", "pending")


def test_resolved_interactions_and_missing_keys_do_not_conflict(migrated):
    engine, ids = migrated
    insert_interaction(engine, ids, "intent:1", "resolved")
    insert_interaction(engine, ids, "intent:1", "cancelled")
    insert_interaction(engine, ids, "intent:1", "pending")
    insert_interaction(engine, ids, None, "pending")
    insert_interaction(engine, ids, None, "pending")
    insert_interaction(engine, ids, "intent:2", "pending")
