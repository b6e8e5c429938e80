"""`switchboard keys`: compare this process's keys with its installation's, or record them on purpose (rotation)."""

from __future__ import annotations

import click
from flask.cli import with_appcontext

from app.core.schema import schema_problem
from app.extensions import db


def _schema_current() -> None:
    from app.cli.database import UPGRADE_FIRST

    problem = schema_problem()
    if problem is not None:
        click.echo(f"{problem}: {UPGRADE_FIRST}.", err=True)
        raise SystemExit(2)


@click.group("keys")
def keys_group() -> None:
    """The keys every instance of this installation must share (SECRET_KEY, SWITCHBOARD_ENCRYPTION_KEY)."""


@keys_group.command("check")
@with_appcontext
def keys_check() -> None:
    """Exit 0 when this process's keys match the installation's (recording them on an empty one), else 2."""
    from app.services import installation

    _schema_current()
    verdict = installation.verify()
    if not verdict.agreed:
        click.echo(str(installation.InstallationMismatch(verdict.problems)), err=True)
        raise SystemExit(2)
    click.echo("The keys match this installation's.")


@keys_group.command("adopt")
@with_appcontext
def keys_adopt() -> None:
    """Record this process's keys as the installation's: instances with the previous ones then refuse to start."""
    from app.services import installation

    _schema_current()
    problems = installation.adopt()
    if problems:
        db.session.rollback()
        for problem in problems:
            click.echo(problem, err=True)
        raise SystemExit(2)
    db.session.commit()
    click.echo("Recorded this process's keys as the installation's.")
