"""A deployment never has an empty catalog: `switchboard db upgrade` ingests the shipped definitions, app start ingests
them when they changed (one query when they did not), concurrent starts ingest once under a database lock, and
`switchboard catalog validate` needs no database. Each test runs on a brand-new database of the backend under test,
next to (never instead of) the suite's migrated one."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from contextlib import ExitStack
from pathlib import Path

import pytest
from sqlalchemy import func, select

from app.catalog.loader import DEFINITIONS_DIR
from app.models import CatalogApp, CatalogState
from tests.conftest import TEST_CONFIG, count_statements
from tests.system.test_migrations import app_on, fresh_database

SHIPPED = {path.stem for path in DEFINITIONS_DIR.glob("*.json")}
SWITCHBOARD = Path(sys.executable).with_name("switchboard")


@pytest.fixture
def migrated_url(tmp_path):
    """A fresh database migrated to head: the catalog tables exist and are empty, as after a bare migration."""
    from flask_migrate import upgrade

    with fresh_database(tmp_path) as url:
        with app_on(url):
            upgrade()
        yield url


def _state(db) -> tuple[int, int]:
    """(ingests so far, cached apps)."""
    db.session.expire_all()
    count = db.session.scalar(select(CatalogState.ingest_count).where(CatalogState.id == 1))
    return count, db.session.scalar(select(func.count()).select_from(CatalogApp))


def test_db_upgrade_ingests_the_shipped_catalog(tmp_path):
    from app.extensions import db

    with fresh_database(tmp_path) as url, app_on(url) as application:
        result = application.test_cli_runner().invoke(args=["db", "upgrade"])
        assert result.exit_code == 0, (result.output, result.exception)
        assert f"Catalog ingested: {len(SHIPPED)} added, 0 updated, 0 removed, 0 unchanged." in result.stdout
        assert _state(db) == (1, len(SHIPPED))

        again = application.test_cli_runner().invoke(args=["db", "upgrade"])
        assert again.exit_code == 0, again.output
        assert f"Catalog ingested: 0 added, 0 updated, 0 removed, {len(SHIPPED)} unchanged." in again.stdout


def test_app_start_ingests_changed_definitions_once_and_then_costs_one_query(migrated_url):
    from app import create_app
    from app.catalog.sync import ensure_catalog_current
    from app.extensions import db

    config = {**TEST_CONFIG, "SQLALCHEMY_DATABASE_URI": migrated_url, "CATALOG_INGEST_ON_START": True}
    create_app(config)  # the first start after a bare migration fills the catalog
    with app_on(migrated_url):
        assert _state(db) == (1, len(SHIPPED))

    create_app(config)  # a restart with the same files does not ingest again
    with app_on(migrated_url):
        assert _state(db) == (1, len(SHIPPED))
        db.session.remove()
        with count_statements(db.engine) as statements:
            assert ensure_catalog_current() == "current"
        assert len(statements) == 1, statements
        assert "catalog_state" in statements[0]


def test_app_start_before_migrating_neither_fails_nor_creates_anything(tmp_path):
    from app import create_app
    from app.catalog.sync import ensure_catalog_current

    with fresh_database(tmp_path) as url:
        create_app({**TEST_CONFIG, "SQLALCHEMY_DATABASE_URI": url, "CATALOG_INGEST_ON_START": True})
        with app_on(url):
            assert ensure_catalog_current() == "no_tables"


def test_concurrent_starts_ingest_once(migrated_url):
    """Eight app instances (as eight gunicorn workers would be) check and ingest at the same moment, each with its own
    engine and connection: exactly one ingests, the seven others wait for its lock and find the catalog current."""
    from app.catalog.sync import ensure_catalog_current
    from app.extensions import db

    workers = 8
    barrier = threading.Barrier(workers)
    outcomes: list[str] = []
    errors: list[BaseException] = []

    def start(application):
        try:
            with application.app_context():
                barrier.wait(timeout=30)
                outcomes.append(ensure_catalog_current())
                db.session.remove()
                db.engine.dispose()
        except BaseException as exc:  # reported below: a thread's failure must fail the test
            errors.append(exc)

    from app import create_app

    apps = [create_app({**TEST_CONFIG, "SQLALCHEMY_DATABASE_URI": migrated_url}) for _ in range(workers)]
    threads = [threading.Thread(target=start, args=(a,), name=f"worker-{i}") for i, a in enumerate(apps)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert errors == []
    assert sorted(outcomes) == ["current"] * (workers - 1) + ["ingested"]
    with app_on(migrated_url):
        assert _state(db) == (1, len(SHIPPED))


def test_changed_definitions_are_ingested_at_the_next_start(migrated_url, tmp_path):
    """An operator's extra folder is part of the catalog: adding a definition there changes the fingerprint, and the
    next start ingests it."""
    from app import create_app
    from app.extensions import db

    extra = tmp_path / "extra"
    extra.mkdir()
    config = {
        **TEST_CONFIG,
        "SQLALCHEMY_DATABASE_URI": migrated_url,
        "CATALOG_INGEST_ON_START": True,
        "CATALOG_EXTRA_DIR": str(extra),
    }
    create_app(config)
    definition = json.loads((DEFINITIONS_DIR / "linear.json").read_text(encoding="utf-8"))
    definition.update(slug="acme-tracker", name="Acme Tracker", featured=False)
    (extra / "acme-tracker.json").write_text(json.dumps(definition), encoding="utf-8")
    create_app(config)
    with app_on(migrated_url):
        assert _state(db) == (2, len(SHIPPED) + 1)
        assert db.session.get(CatalogApp, "acme-tracker").name == "Acme Tracker"


def _switchboard(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(SWITCHBOARD), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_validate_needs_no_database(tmp_path):
    """`catalog validate` with a DATABASE_URL pointing at a port where nothing listens: it never connects."""
    nowhere = {
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:9/nowhere",
        "SWITCHBOARD_INSTANCE_PATH": str(tmp_path),
    }
    result = _switchboard("catalog", "validate", env=nowhere)
    assert result.returncode == 0, result.stderr
    assert result.stdout == f"{len(SHIPPED)} app definition(s) are valid.\n"


def test_validate_reads_the_extra_folder_and_refuses_a_slug_defined_twice(tmp_path):
    extra = tmp_path / "extra"
    extra.mkdir()
    (extra / "linear.json").write_text((DEFINITIONS_DIR / "linear.json").read_text(encoding="utf-8"))
    env = {
        "DATABASE_URL": "postgresql://nobody@127.0.0.1:9/nowhere",
        "SWITCHBOARD_INSTANCE_PATH": str(tmp_path),
        "SWITCHBOARD_CATALOG_EXTRA_DIR": str(extra),
    }
    result = _switchboard("catalog", "validate", env=env)
    assert result.returncode == 1
    assert result.stderr == (
        f"{extra / 'linear.json'}: slug 'linear' is already defined by {DEFINITIONS_DIR / 'linear.json'}\n"
        "1 problem(s); nothing was written.\n"
    )


def test_ingest_definitions_only_works_on_a_freshly_migrated_database(migrated_url):
    from app.extensions import db

    with ExitStack() as stack:
        application = stack.enter_context(app_on(migrated_url))
        result = application.test_cli_runner().invoke(args=["catalog", "ingest", "--definitions-only"])
        assert result.exit_code == 0, result.output
        assert result.stdout.startswith(
            f"Catalog ingested: {len(SHIPPED)} added, 0 updated, 0 removed, 0 unchanged."
        )
        assert _state(db) == (1, len(SHIPPED))
