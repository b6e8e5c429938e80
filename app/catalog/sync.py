"""Keep the cached catalog in step with the definition files without anyone running a command.

`switchboard db upgrade` ingests after migrating (app/cli.py). At app start, `ensure_catalog_current` compares the
fingerprint of the definition files (`loader.definitions_fingerprint`, computed from the files, no query) with the one
stored in `catalog_state` (one query). Only when they differ does it ingest, under a database lock, and checks again
once it holds the lock: several gunicorn workers starting together ingest once, and the others find the catalog
current when the lock is theirs.

The lock: PostgreSQL, a transaction-scoped advisory lock (`pg_advisory_xact_lock`); SQLite, its writer lock, taken by
a no-op UPDATE of the state row (the busy timeout makes the others wait). Both end with the commit.
"""

from __future__ import annotations

import logging
from typing import Literal

from sqlalchemy import select, text, update
from sqlalchemy.exc import OperationalError, ProgrammingError

from app.catalog.loader import (
    DEFINITIONS_DIR,
    CatalogError,
    definition_directories,
    definitions_fingerprint,
    ingest_definitions,
)
from app.extensions import db
from app.models.connections import CatalogState

log = logging.getLogger(__name__)

# Any fixed 64-bit key; names the catalog ingest among the advisory locks of this database.
CATALOG_LOCK_KEY = 0x53424341544C4F47  # "SBCATLOG"

Outcome = Literal["current", "ingested", "failed", "no_tables"]


def stored_fingerprint() -> str | None:
    """The fingerprint the cached catalog was ingested from (None: never ingested). One query."""
    return db.session.scalar(select(CatalogState.definitions_hash).where(CatalogState.id == 1))


def lock_catalog() -> None:
    """Hold the catalog's ingest lock until the session's transaction ends (commit or rollback)."""
    if db.session.get_bind().dialect.name == "postgresql":
        db.session.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": CATALOG_LOCK_KEY})
    else:
        db.session.execute(
            update(CatalogState).where(CatalogState.id == 1).values(ingest_count=CatalogState.ingest_count)
        )


def ensure_catalog_current() -> Outcome:
    """Ingest the definition files when the cached catalog was built from other ones; commits what it writes.

    Never raises for a database without tables (the app may start before `db upgrade`) or for invalid definition
    files (the previous catalog stays; the problems are logged): serving with the last good catalog beats not
    starting.
    """
    directories = definition_directories(DEFINITIONS_DIR)
    fingerprint = definitions_fingerprint(directories)
    try:
        current = stored_fingerprint() == fingerprint
    except (OperationalError, ProgrammingError) as exc:
        db.session.rollback()
        log.warning(
            "could not read the catalog state (%s); the catalog was not checked. Run `switchboard db upgrade`.",
            type(getattr(exc, "orig", exc)).__name__,
        )
        return "no_tables"
    db.session.rollback()  # end the read; the check below runs in the locked transaction
    if current:
        return "current"
    try:
        lock_catalog()
        if stored_fingerprint() == fingerprint:
            db.session.commit()
            return "current"
        report = ingest_definitions(DEFINITIONS_DIR)
        db.session.commit()
    except CatalogError as error:
        db.session.rollback()
        log.error("the app definitions are invalid; the cached catalog was kept:\n%s", error)
        return "failed"
    except Exception:
        db.session.rollback()
        raise
    log.info(
        "catalog ingested at start: %s",
        ", ".join(f"{len(report[kind])} {kind}" for kind in ("added", "updated", "removed", "unchanged")),
    )
    return "ingested"
