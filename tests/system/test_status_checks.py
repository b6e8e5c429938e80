"""The closed value sets of statuses and kinds are CHECK constraints (migration 0015), on the backend under test.

Upgrading to head adds them without losing the partial unique indexes (SQLite rebuilds the tables), a value outside
a set is refused, downgrading past 0015 takes them away again, and the migration's snapshot of each set is the
model's `ValueSet`.
"""

from __future__ import annotations

import importlib.util
import uuid
from pathlib import Path

import pytest
from sqlalchemy import inspect, text
from sqlalchemy.exc import IntegrityError

from app.models import Agent, Company, Issue, Membership, User
from app.models.activity import ActorType
from app.models.agents import AdapterType, AgentStatus
from app.models.assistants import ClientKind
from app.models.connections import (
    AuthKind,
    ConnectionStatus,
    GrantKind,
    GrantStatus,
    InstallTarget,
    ToolAction,
)
from app.models.runs import RunStatus, WakeupStatus
from app.models.tenancy import MembershipStatus, Role
from app.models.trust import TrustScope
from app.models.work import IssueStatus
from tests.paths import ROOT
from tests.system.test_migrations import PARTIAL_INDEXES, app_on, fresh_database, index_definition

MIGRATION = ROOT / "migrations" / "versions" / "0015_status_checks.py"

MODEL_SETS = {
    ("activity_log", "actor_type"): ActorType,
    ("agents", "adapter_type"): AdapterType,
    ("agents", "status"): AgentStatus,
    ("issues", "status"): IssueStatus,
    ("memberships", "role"): Role,
    ("memberships", "status"): MembershipStatus,
    ("heartbeat_runs", "status"): RunStatus,
    ("wakeup_requests", "status"): WakeupStatus,
    ("tool_connections", "status"): ConnectionStatus,
    ("tool_connections", "auth_kind"): AuthKind,
    ("connection_grants", "kind"): GrantKind,
    ("connection_grants", "status"): GrantStatus,
    ("connection_installs", "target_type"): InstallTarget,
    ("tool_policies", "action"): ToolAction,
    ("assistant_clients", "kind"): ClientKind,
    ("tool_trust_rules", "scope"): TrustScope,
}


def _migration():
    spec = importlib.util.spec_from_file_location("status_checks_migration", MIGRATION)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def check_names(engine, table: str) -> set[str]:
    """The table's CHECK constraint names; none for a table a later revision creates (below it, it is absent)."""
    if not inspect(engine).has_table(table):
        return set()
    return {c["name"] for c in inspect(engine).get_check_constraints(table)}


def _load(path: Path):
    spec = importlib.util.spec_from_file_location(f"migration_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_migration_snapshots_every_model_set():
    """0015's snapshot, with each later revision's `CHECK_CHANGES` folded over it in order, is the models' sets."""
    checks = _migration().CHECKS
    snapshot = {
        (table, column): values for table, columns in checks.items() for column, values in columns.items()
    }
    for path in sorted(MIGRATION.parent.glob("*.py")):
        if path.name > MIGRATION.name:
            snapshot.update(getattr(_load(path), "CHECK_CHANGES", {}))
    assert snapshot == {key: values.values() for key, values in MODEL_SETS.items()}


def test_models_carry_the_same_constraints():
    from app.extensions import db

    found = {
        (table.name, constraint.name)
        for table in db.metadata.tables.values()
        for constraint in table.constraints
        if constraint.__class__.__name__ == "CheckConstraint"
    }
    assert found == {(table, f"ck_{table}_{column}") for table, column in MODEL_SETS}


def _seed(conn) -> dict:
    company_id, user_id, agent_id = uuid.uuid4(), uuid.uuid4(), uuid.uuid4()
    conn.execute(Company.__table__.insert().values(id=company_id, name="A", issue_prefix="A"))
    conn.execute(
        User.__table__.insert().values(id=user_id, email="a@example.com", name="A", password_hash="x")
    )
    conn.execute(Agent.__table__.insert().values(id=agent_id, company_id=company_id, name="Builder"))
    return {"company": company_id, "user": user_id, "agent": agent_id}


def _insert_issue(conn, ids, status: str) -> None:
    conn.execute(
        Issue.__table__.insert().values(
            id=uuid.uuid4(),
            company_id=ids["company"],
            identifier=f"A-{uuid.uuid4().hex[:6]}",
            title="T",
            status=status,
        )
    )


def test_upgrade_adds_the_checks_and_downgrade_removes_them(tmp_path):
    from flask_migrate import downgrade, upgrade

    from app.extensions import db

    with fresh_database(tmp_path) as url, app_on(url):
        upgrade()
        engine = db.engine
        for table, column in MODEL_SETS:
            assert f"ck_{table}_{column}" in check_names(engine, table), (table, column)
        for name in PARTIAL_INDEXES.values():
            definition = index_definition(engine, name)
            assert definition is not None and "WHERE" in definition.upper(), name

        with engine.begin() as conn:
            ids = _seed(conn)
            _insert_issue(conn, ids, "in_review")
            conn.execute(
                Membership.__table__.insert().values(
                    id=uuid.uuid4(),
                    company_id=ids["company"],
                    user_id=ids["user"],
                    role="viewer",
                    status="suspended",
                )
            )
        for insert in (
            lambda conn: _insert_issue(conn, ids, "archived"),
            lambda conn: conn.execute(text("UPDATE memberships SET role = 'superuser'")),
            lambda conn: conn.execute(text("UPDATE agents SET status = 'sleeping'")),
            lambda conn: conn.execute(text("UPDATE agents SET adapter_type = 'ssh'")),
        ):
            with pytest.raises(IntegrityError), engine.begin() as conn:
                insert(conn)

        downgrade(revision="0014_tool_listing_fields")
        for table, column in MODEL_SETS:
            if table in inspect(engine).get_table_names():  # tables of later revisions are gone altogether
                assert f"ck_{table}_{column}" not in check_names(engine, table), (table, column)
        for name in PARTIAL_INDEXES.values():
            definition = index_definition(engine, name)
            assert definition is not None and "WHERE" in definition.upper(), name
        with engine.begin() as conn:
            _insert_issue(conn, ids, "archived")  # nothing refuses it any more
            conn.execute(text("DELETE FROM issues WHERE status = 'archived'"))

        upgrade()
        for table, column in MODEL_SETS:
            assert f"ck_{table}_{column}" in check_names(engine, table), (table, column)
