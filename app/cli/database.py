"""The guard every command that reads the database wears: a database that was never migrated, or is at another
revision, is refused with one sentence. A module of its own so that command groups outside `app.cli` (the
catalog's) use it without importing the `switchboard` group that registers them."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import click
from flask.cli import with_appcontext

from app.core.schema import schema_problem

UPGRADE_FIRST = "run `switchboard db upgrade` first"


def needs_database(command: Callable[..., Any]) -> Callable[..., Any]:
    """`with_appcontext`, and refuse (exit 2, a sentence on stderr) on a database that was never migrated or is
    at another revision, instead of a traceback from the first query ("no such table")."""

    @functools.wraps(command)
    def checked(*args: Any, **kwargs: Any) -> Any:
        problem = schema_problem()
        if problem is not None:
            click.echo(f"{problem}: {UPGRADE_FIRST}.", err=True)
            raise SystemExit(2)
        refuse_other_keys()
        return command(*args, **kwargs)

    return with_appcontext(checked)


def refuse_other_keys() -> None:
    """Exit 2 with the problems on stderr when this process's keys differ from the installation's."""
    from flask import current_app

    from app.services import installation

    if not current_app.config.get("INSTALLATION_CHECK"):
        return
    verdict = installation.verify()
    if not verdict.agreed:
        click.echo(str(installation.InstallationMismatch(verdict.problems)), err=True)
        raise SystemExit(2)
