"""Keep the cached catalog in step with the definition files without anyone running a command.

`switchboard db upgrade` ingests after migrating (app/cli.py). At app start, `ensure_catalog_current` compares the
fingerprint of the definition files (`loader.definitions_fingerprint`, computed from the files, no query) with the one
stored in `catalog_state` (one query). Only when they differ does it ingest, under a database lock, and checks again
once it holds the lock: several gunicorn workers starting together ingest once, and the others find the catalog
current when the lock is theirs.

Never back (issue 31 item 6): every fingerprint ever ingested is kept (`catalog_ingests`). Instances that ship
different definitions would otherwise each ingest theirs at start, the last one winning, at every restart; so a
process ingests at start only definitions the installation has never had (a new release's, or the first ones), and
one whose definitions were ingested before (an older release's, restarted during a rolling deploy) keeps the catalog
and says so in the log and in `/readyz` (`catalog_status`). The deploy step (`switchboard db upgrade`, `switchboard
catalog ingest`) always ingests, so an intended return to older definitions goes through it.

The lock: PostgreSQL, a transaction-scoped advisory lock (`pg_advisory_xact_lock`); SQLite, its writer lock, taken by
a no-op UPDATE of the state row (the busy timeout makes the others wait). Both end with the commit.
"""

from __future__ import annotations

import logging
from typing import Literal

from flask import current_app
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
from app.models.installation import CatalogIngest

log = logging.getLogger(__name__)

# Any fixed 64-bit key; names the catalog ingest among the advisory locks of this database.
CATALOG_LOCK_KEY = 0x53424341544C4F47  # "SBCATLOG"

Outcome = Literal["current", "ingested", "kept", "failed", "no_tables"]


def stored_fingerprint() -> str | None:
    """The fingerprint the cached catalog was ingested from (None: never ingested). One query."""
    return db.session.scalar(select(CatalogState.definitions_hash).where(CatalogState.id == 1))


def was_ingested_before(fingerprint: str) -> bool:
    return db.session.get(CatalogIngest, fingerprint) is not None


_OWN_KEY = "switchboard_catalog_fingerprint"


def own_fingerprint(*, fresh: bool = False) -> str:
    """The fingerprint of this process's definition files: read at start (`fresh`), then remembered by the app, so
    `/readyz` compares the definitions this process started with without reading the files each time."""
    known = current_app.extensions.get(_OWN_KEY)
    if known is None or fresh:
        known = current_app.extensions[_OWN_KEY] = definitions_fingerprint(
            definition_directories(DEFINITIONS_DIR)
        )
    return str(known)


def catalog_status() -> dict[str, str]:
    """For `/readyz`: whether the cached catalog came from this process's definitions ("current"), from others
    ("differs", with both fingerprints' first 12 characters), or was never ingested ("empty"). One query."""
    mine = own_fingerprint()
    stored = stored_fingerprint() or ""
    if stored == mine:
        return {"status": "current"}
    if not stored:
        return {"status": "empty"}
    return {"status": "differs", "definitions": mine[:12], "database": stored[:12]}


def _log_kept(mine: str, stored: str) -> None:
    log.warning(
        "this process's app definitions (%s) differ from the ones the catalog was ingested from (%s) and were "
        "ingested before (an older release's): the catalog is kept. Tools of apps this process does not define "
        "fail here; run `switchboard catalog ingest` to make these definitions the catalog's.",
        mine[:12],
        stored[:12],
    )


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
    fingerprint = own_fingerprint(fresh=True)
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
        stored = stored_fingerprint() or ""
        if stored == fingerprint:
            db.session.commit()
            return "current"
        if stored and was_ingested_before(fingerprint):
            db.session.commit()
            _log_kept(fingerprint, stored)
            return "kept"
        report = ingest_definitions(DEFINITIONS_DIR)
        db.session.commit()
    except CatalogError as error:
        db.session.rollback()
        log.error("the app definitions are invalid; the cached catalog was kept:\n%s", error)
        return "failed"
    except Exception:
        db.session.rollback()
        raise
    if stored:
        log.warning(
            "the catalog was ingested from other app definitions (%s) than this process's (%s), which are new to "
            "this installation: ingested them. Instances still shipping the previous ones keep this catalog.",
            stored[:12],
            fingerprint[:12],
        )
    log.info(
        "catalog ingested at start: %s",
        ", ".join(f"{len(report[kind])} {kind}" for kind in ("added", "updated", "removed", "unchanged")),
    )
    return "ingested"
