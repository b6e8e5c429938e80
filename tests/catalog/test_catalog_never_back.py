"""The catalog never flips back (issue 31 item 6): instances whose app definitions differ used to ingest theirs at
every start, the last one winning. Now a starting process ingests only definitions the installation never had; one
whose definitions were ingested before (an older release's) keeps the catalog, logs why, and shows the difference on
`/readyz` without becoming not ready. The deploy step (`catalog ingest`, `db upgrade`) still changes it on purpose."""

from __future__ import annotations

import json
import logging

import pytest
from flask_migrate import upgrade
from sqlalchemy import func, select

from app.catalog.loader import DEFINITIONS_DIR
from app.models import CatalogApp, CatalogState
from tests.conftest import TEST_CONFIG
from tests.system.test_migrations import app_on, fresh_database

SHIPPED = {path.stem for path in DEFINITIONS_DIR.glob("*.json")}


@pytest.fixture
def migrated_url(tmp_path):
    with fresh_database(tmp_path) as url:
        with app_on(url):
            upgrade()
        yield url


def _state(url: str) -> tuple[int, set[str]]:
    """(ingests so far, cached slugs)."""
    from app.extensions import db

    with app_on(url):
        count = db.session.scalar(select(CatalogState.ingest_count).where(CatalogState.id == 1))
        slugs = set(db.session.scalars(select(CatalogApp.slug)))
        assert db.session.scalar(select(func.count()).select_from(CatalogApp)) == len(slugs)
    return count, slugs


def _start(url: str, extra: str | None):
    from app import create_app
    from app.extensions import db

    application = create_app(
        {
            **TEST_CONFIG,
            "SQLALCHEMY_DATABASE_URI": url,
            "CATALOG_INGEST_ON_START": True,
            "CATALOG_EXTRA_DIR": extra,
        }
    )
    with application.app_context():
        db.session.remove()
        db.engine.dispose()
    return application


def _newer_definitions(tmp_path) -> str:
    """The newer release's definitions: the shipped ones and one more app."""
    extra = tmp_path / "newer"
    extra.mkdir()
    definition = json.loads((DEFINITIONS_DIR / "linear.json").read_text(encoding="utf-8"))
    definition.update(slug="acme-tracker", name="Acme Tracker", featured=False)
    (extra / "acme-tracker.json").write_text(json.dumps(definition), encoding="utf-8")
    return str(extra)


def test_restarts_of_an_older_instance_never_turn_the_catalog_back(migrated_url, tmp_path, caplog):
    newer = _newer_definitions(tmp_path)
    _start(migrated_url, None)  # the previous release fills the empty catalog
    assert _state(migrated_url) == (1, SHIPPED)
    _start(migrated_url, newer)  # the new release's first instance brings definitions never ingested
    assert _state(migrated_url) == (2, SHIPPED | {"acme-tracker"})

    caplog.set_level(logging.WARNING, logger="app.catalog.sync")
    for _ in range(3):  # both releases restart during the rolling deploy
        old = _start(migrated_url, None)
        _start(migrated_url, newer)
    assert _state(migrated_url) == (2, SHIPPED | {"acme-tracker"})
    kept = [r.getMessage() for r in caplog.records if "the catalog is kept" in r.getMessage()]
    assert len(kept) == 3

    ready = old.test_client().get("/readyz")
    assert (
        ready.status_code == 200
    )  # the old instance keeps serving: a difference is information, not unreadiness
    assert ready.json["status"] == "ready"
    catalog = ready.json["catalog"]
    assert catalog["status"] == "differs"
    assert catalog["definitions"] != catalog["database"]
    assert kept[0].startswith(
        f"this process's app definitions ({catalog['definitions']}) differ from the ones the "
    )
    with old.app_context():
        from app.extensions import db

        db.session.remove()
        db.engine.dispose()


def test_the_deploy_step_still_changes_the_catalog_back_on_purpose(migrated_url, tmp_path):
    newer = _newer_definitions(tmp_path)
    _start(migrated_url, None)
    _start(migrated_url, newer)
    with app_on(migrated_url) as application:
        application.config["CATALOG_EXTRA_DIR"] = None
        result = application.test_cli_runner().invoke(args=["catalog", "ingest"])
        assert result.exit_code == 0, (result.output, result.exception)
        assert "Catalog ingested: 0 added, 0 updated, 1 removed" in result.stdout
    assert _state(migrated_url) == (3, SHIPPED)
    current = _start(migrated_url, None).test_client().get("/readyz")
    assert current.json["catalog"] == {"status": "current"}
    _start(migrated_url, newer)  # a newer instance that restarts now finds its definitions ingested before
    assert _state(migrated_url) == (3, SHIPPED)
