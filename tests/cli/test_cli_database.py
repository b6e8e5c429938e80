"""Commands that need tables refuse a database that was never migrated (or is at another revision): one sentence on
stderr naming `switchboard db upgrade`, exit status 2, no traceback. Driven through the Flask CLI runner on a fresh
SQLite file, next to (never instead of) the suite's migrated database."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import TEST_CONFIG

# Fixed ids (any id will do: the tables are missing): pytest-xdist workers must collect the same test names.
COMMANDS_THAT_NEED_TABLES = [
    ["catalog", "ingest"],
    ["catalog", "ingest", "--definitions-only"],
    ["demo"],
    ["api-keys", "create", "--email", "nobody@example.com"],
    ["runs", "open", "--agent", str(uuid.UUID(int=1)), "--issue", "ACME-1"],
    ["runs", "close", str(uuid.UUID(int=2))],
    ["worker", "--once"],
]


@pytest.fixture
def fresh_app(tmp_path):
    from app import create_app

    return create_app({**TEST_CONFIG, "SQLALCHEMY_DATABASE_URI": f"sqlite:///{tmp_path / 'fresh.db'}"})


@pytest.mark.parametrize("args", COMMANDS_THAT_NEED_TABLES, ids=" ".join)
def test_commands_on_a_database_never_migrated_say_to_upgrade_first(fresh_app, args):
    result = fresh_app.test_cli_runner().invoke(args=args)
    assert result.exit_code == 2, (result.output, result.exception)
    assert result.stderr == "The database has no tables yet: run `switchboard db upgrade` first.\n"
    assert result.stdout == ""
    assert "Traceback" not in result.output


def test_after_upgrade_the_command_runs_and_a_downgraded_database_is_refused(fresh_app):
    runner = fresh_app.test_cli_runner()
    assert runner.invoke(args=["db", "upgrade"]).exit_code == 0
    ingested = runner.invoke(args=["catalog", "ingest", "--definitions-only"])
    assert ingested.exit_code == 0, ingested.output
    assert ingested.stdout.startswith("Catalog ingested:")
    assert runner.invoke(args=["catalog", "validate"]).exit_code == 0  # needs no database at all

    assert runner.invoke(args=["db", "downgrade"]).exit_code == 0
    behind = runner.invoke(args=["catalog", "ingest"])
    assert behind.exit_code == 2
    assert behind.stderr.startswith("The database is at revision ")
    assert behind.stderr.endswith(": run `switchboard db upgrade` first.\n")
