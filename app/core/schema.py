"""Whether the database's schema is the one this code was written for (issue 31 items 4 and 7).

During an upgrade the new code can start before `switchboard db upgrade` has run (or a database can be restored from
an older release). Such a process must say so, not answer 500s from queries on columns that do not exist yet:
`/readyz` reports the schema, and every other request is answered 503 "upgrading" until the schema reaches the code's
head. A database migrated by the next release (revisions this code has no script for) serves too: each release's
migrations only add what the previous release's code does not read, and remove things a release later (README
"Health checks, draining and upgrades"). A process that found its schema current remembers it (no query per request afterwards); one that did not
checks again on every request, so it starts serving as soon as the upgrade has run, without a restart.
"""

from __future__ import annotations

import functools

from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from flask import current_app
from sqlalchemy.exc import SQLAlchemyError

from app.extensions import db

UPGRADING_MESSAGE = "Switchboard is being upgraded: this version is waiting for `switchboard db upgrade`. Try again in a minute."
_READY_KEY = "switchboard_schema_ready"


@functools.cache
def _script(directory: str) -> tuple[frozenset[str], frozenset[str]]:
    # The migration scripts ship with the code: read once per process. (heads, every revision this code knows)
    script = ScriptDirectory(directory)
    return frozenset(script.get_heads()), frozenset(rev.revision for rev in script.walk_revisions())


def code_heads() -> frozenset[str]:
    return _script(current_app.extensions["migrate"].directory)[0]


def known_revisions() -> frozenset[str]:
    return _script(current_app.extensions["migrate"].directory)[1]


def newer_revisions(current: frozenset[str]) -> frozenset[str]:
    """The database's revisions this code has no script for: a newer release migrated it (see `schema_problem`)."""
    return current - known_revisions()


def database_heads() -> frozenset[str]:
    with db.engine.connect() as connection:
        return frozenset(MigrationContext.configure(connection).get_current_heads())


def schema_problem() -> str | None:
    """Why the database cannot serve this version (no tables, or an older or other revision), else None."""
    current, heads = database_heads(), code_heads()
    if not current:
        return "The database has no tables yet"
    if newer_revisions(current):
        # A newer release's `db upgrade` ran while this instance still serves (a rolling deploy). Its migrations only
        # add (expand, then contract a release later: tests/system/test_expand_contract.py), so this code keeps working.
        return None
    if current != heads:
        found, wanted = ", ".join(sorted(current)), ", ".join(sorted(heads))
        return f"The database is at revision {found}; this version needs {wanted}"
    return None


def is_current() -> bool:
    """The schema is at the code's head. Remembered per app once true; a database error counts as not current."""
    if current_app.extensions.get(_READY_KEY):
        return True
    try:
        current = schema_problem() is None
    except SQLAlchemyError:
        return False
    if current:
        current_app.extensions[_READY_KEY] = True
    return current
