"""Upgrades keep the previous release's code working (issue 31 item 7): expand, then contract.

During a rolling deploy `switchboard db upgrade` runs while instances of the previous release still serve. So a
release's migrations only *expand* (new tables, nullable or defaulted columns, indexes, data backfills), and what the
previous release still reads is removed (*contract*) a release later, once no code reads it.

- `test_migrations_after_the_baseline_only_expand` reads every migration after `BASELINE` and fails on an operation
  that would break the previous release's code (a drop, a rename, a type or nullability change, a NOT NULL column
  without a default, a new constraint on an existing table, an arbitrary SQL statement), unless `CONTRACTS` names it
  with the reason no code of the previous release reads what it removes.
- `test_this_code_serves_a_database_the_next_release_expanded` upgrades a database with this code's migrations plus
  one more expand step it has no script for (as the next release's `db upgrade` would), then runs this code against
  it: sign in through the form, the board, a runtime-tools call, readiness, a worker pass. No 500, no 503.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
from flask_migrate import upgrade

from app.core import schema
from tests.conftest import RequestInItsOwnContextClient
from tests.doors import search
from tests.factories import DEFAULT_PASSWORD, Factory
from tests.paths import ROOT
from tests.system.test_migrations import app_on, fresh_database

MIGRATIONS = ROOT / "migrations"
# The last migration written before the policy: later ones are held to it.
BASELINE = "0027_trust_rules"
# Contract steps: {revision: why the previous release's code no longer reads what it removes}. Empty so far.
CONTRACTS: dict[str, str] = {}

EXPANDING = {"create_table", "create_index", "add_column", "bulk_insert", "execute", "f", "get_bind"}
# Statements a migration may run through `op.execute`: backfills and indexes, which the previous code never notices.
EXPANDING_SQL = re.compile(r"^\s*(INSERT|UPDATE|CREATE (UNIQUE )?INDEX)\b", re.IGNORECASE)


def _revisions() -> list[tuple[str, Path]]:
    """(revision, file) in migration order."""
    found: dict[str, tuple[str | None, Path]] = {}
    for path in sorted((MIGRATIONS / "versions").glob("*.py")):
        values = {}
        for node in ast.parse(path.read_text()).body:
            target = node.targets[0] if isinstance(node, ast.Assign) else None
            if isinstance(target, ast.Name) and target.id in {"revision", "down_revision"}:
                values[target.id] = ast.literal_eval(node.value)
        found[values["revision"]] = (values.get("down_revision"), path)
    order, child = [], {down: rev for rev, (down, _) in found.items()}
    current = child.get(None)
    while current is not None:
        order.append((current, found[current][1]))
        current = child.get(current)
    assert len(order) == len(found), "the migrations are not one chain"
    return order


def _string(node: ast.expr) -> str | None:
    try:
        value = ast.literal_eval(node)
    except ValueError:
        return None
    return value if isinstance(value, str) else None


def contract_operations(source: str) -> list[str]:
    """The operations in a migration's `upgrade()` that could break the previous release's code, as sentences."""
    problems: list[str] = []
    tree = ast.parse(source)
    upgrade_fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "upgrade")
    for node in ast.walk(upgrade_fn):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "op":
            name = func.attr
        elif isinstance(func, ast.Name) and func.id.startswith("_drop"):
            name = func.id  # a helper that drops (several migrations wrap `DROP COLUMN` for SQLite)
        else:
            continue
        if name not in EXPANDING:
            problems.append(
                f"line {node.lineno}: op.{name}"
                if not name.startswith("_")
                else f"line {node.lineno}: {name}"
            )
            continue
        if name == "execute":
            sql = _string(node.args[0]) if node.args else None
            if sql is None or not EXPANDING_SQL.match(sql):
                problems.append(
                    f"line {node.lineno}: op.execute of a statement that is not a backfill or an index"
                )
        if name == "add_column":
            column = node.args[1] if len(node.args) > 1 else None
            if isinstance(column, ast.Call):
                keywords = {k.arg: k.value for k in column.keywords}
                nullable = keywords.get("nullable")
                not_null = isinstance(nullable, ast.Constant) and nullable.value is False
                if not_null and "server_default" not in keywords:
                    problems.append(
                        f"line {node.lineno}: a NOT NULL column without a server default (the previous code's "
                        "inserts would fail)"
                    )
    return problems


def test_migrations_after_the_baseline_only_expand():
    revisions = [rev for rev, _ in _revisions()]
    assert BASELINE in revisions
    later = _revisions()[revisions.index(BASELINE) + 1 :]
    assert later, "no migration after the baseline: move BASELINE only forward"
    found = {
        rev: problems
        for rev, path in later
        if rev not in CONTRACTS and (problems := contract_operations(path.read_text()))
    }
    assert found == {}


def test_the_policy_catches_what_would_break_the_previous_code():
    """The reader above is not vacuous: the contract steps earlier migrations took are all caught."""
    assert contract_operations((MIGRATIONS / "versions" / "0023_drop_run_elicitation.py").read_text())
    sample = """
def upgrade():
    op.create_table("fine")
    op.add_column("t", sa.Column("a", sa.Integer(), nullable=True))
    op.add_column("t", sa.Column("b", sa.Integer(), nullable=False, server_default="0"))
    op.add_column("t", sa.Column("c", sa.Integer(), nullable=False))
    op.drop_column("t", "d")
    op.alter_column("t", "e", new_column_name="f")
    op.execute("INSERT INTO fine SELECT 1")
    op.execute("DELETE FROM t")
    with op.batch_alter_table("t") as batch:
        batch.drop_column("g")
"""
    assert contract_operations(sample) == [
        "line 6: a NOT NULL column without a server default (the previous code's inserts would fail)",
        "line 7: op.drop_column",
        "line 8: op.alter_column",
        "line 10: op.execute of a statement that is not a backfill or an index",
        "line 11: op.batch_alter_table",
    ]


NEXT_EXPAND = '''"""The next release's expand step (a test's stand-in): a nullable column and a new table.

Revision ID: 9999_next_release_expand
Revises: {head}
"""

from alembic import op
import sqlalchemy as sa

revision = "9999_next_release_expand"
down_revision = "{head}"
branch_labels = None
depends_on = None


def upgrade():
    op.add_column("issues", sa.Column("next_release_note", sa.Text(), nullable=True))
    op.create_table("next_release_things", sa.Column("id", sa.Integer(), primary_key=True))


def downgrade():
    op.drop_table("next_release_things")
'''


@pytest.fixture
def next_release_database(tmp_path):
    """A fresh database upgraded by this code's migrations plus the next release's expand step."""
    from app.catalog.loader import ingest_definitions
    from app.extensions import db

    directory = tmp_path / "next-migrations"
    shutil.copytree(MIGRATIONS, directory, ignore=shutil.ignore_patterns("__pycache__"))
    (head,) = (rev for rev, _ in _revisions()[-1:])
    (directory / "versions" / "9999_next_release_expand.py").write_text(NEXT_EXPAND.format(head=head))
    with fresh_database(tmp_path) as url:
        with app_on(url):
            upgrade(directory=str(directory))
            ingest_definitions()
            db.session.commit()
        yield url


def test_this_code_serves_a_database_the_next_release_expanded(next_release_database):
    from app.extensions import db
    from app.workers.loop import run_once

    with app_on(next_release_database) as application:
        assert schema.database_heads() == {"9999_next_release_expand"}
        assert schema.schema_problem() is None
        make = Factory(db)
        company, owner, agent, issue = make.team("Next Inc")
        _, token = make.run(agent, issue)
        email, title = owner.email, issue.title
        application.test_client_class = RequestInItsOwnContextClient
        client = application.test_client()

        ready = client.get("/readyz")
        assert (ready.status_code, ready.json["status"], ready.json["schema"]) == (200, "ready", "ok")
        login = client.get("/login")
        csrf = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', login.text)
        assert csrf, login.text
        signed_in = client.post(
            "/login", data={"csrf_token": csrf.group(1), "email": email, "password": DEFAULT_PASSWORD}
        )
        assert (signed_in.status_code, signed_in.headers["Location"]) == (303, "/"), signed_in.text
        assert client.get("/").status_code == 200
        board = client.get("/tasks")
        assert board.status_code == 200
        assert title in board.text
        found = search(client, token, "github")
        assert found.status_code == 200, found.text
        assert found.json["results"][0]["service"] == "github", found.json
        run_once(application)  # a worker of this release does a pass over the newer schema
