"""The `switchboard` command: the app's Flask CLI plus our own commands."""

from __future__ import annotations

import functools
import json
from typing import Any

import click
from flask import Flask
from flask.cli import FlaskGroup, with_appcontext

from app.cli.database import needs_database, refuse_other_keys
from app.core.schema import schema_problem
from app.extensions import db


def _create_app() -> Flask:
    from app import create_app

    # Commands manage the catalog themselves (`db upgrade` and `catalog ingest` ingest it, `catalog validate` must
    # not need a database), so the CLI's app skips the ingest at start.
    # Likewise the keys: the commands that use the database check them (`needs_database`), `db upgrade` after
    # migrating, and `keys adopt` must run when they differ.
    return create_app({"CATALOG_INGEST_ON_START": False, "INSTALLATION_CHECK_AT_START": False})


@click.group(cls=FlaskGroup, create_app=_create_app)
def main() -> None:
    """Switchboard: connect AI agents to the services they need."""


def _emit(data: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        for key, value in data.items():
            click.echo(f"{key}: {value}")


@click.command("demo")
@click.option("--json", "as_json", is_flag=True, help="Print the demo records as JSON.")
@needs_database
def demo_command(as_json: bool) -> None:
    """Create (or show) the demo company, people, agents and tasks."""
    from app.services.demo import load_demo

    data = load_demo()
    db.session.commit()
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"Demo company: {data['company']['name']}")
        for user in data["users"]:
            click.echo(f"  sign in as {user['email']} / {user['password']} ({user['role']})")
        provider = data["demoProvider"]
        click.echo(
            "  offline: assign 'Record the launch decisions in Honcho' to Builder; `make run` serves a local Honcho"
            f" for its card: connect it with API key {provider['apiKey']} and workspace {provider['workspace']}"
        )


@click.group("api-keys")
def api_keys_group() -> None:
    """Personal board API keys."""


@api_keys_group.command("create")
@click.option("--email", required=True)
@click.option("--name", default="CLI key")
@click.option("--json", "as_json", is_flag=True)
@needs_database
def api_keys_create(email: str, name: str, as_json: bool) -> None:
    """Create an API key for a person and print it once."""
    from app.services.accounts import create_api_key, find_user_by_email

    user = find_user_by_email(email)
    if user is None:
        raise click.ClickException(f"No user with email {email}")
    key, token = create_api_key(user, name)
    db.session.commit()
    _emit({"token": token, "id": str(key.id), "name": key.name}, as_json)


def _upgrade_then_ingest(upgrade: click.Command) -> click.Command:
    """Flask-Migrate's `db upgrade`, followed by a catalog ingest once the database is at this version's head, so a
    fresh deployment serves the shipped catalog right after its first `switchboard db upgrade`."""

    callback = upgrade.callback
    if callback is None:  # Flask-Migrate's command always has one
        raise TypeError(f"the {upgrade.name} command has no callback to extend")

    @functools.wraps(callback)
    def upgraded(*args: Any, **kwargs: Any) -> None:
        callback(*args, **kwargs)
        if kwargs.get("sql") or schema_problem() is not None:
            return  # offline SQL output, or an upgrade to an older revision: the tables may not fit this version
        refuse_other_keys()  # the deploy step of a process with other keys stops here, before the catalog
        from app.catalog.cli import report_ingest
        from app.catalog.loader import CatalogError, ingest_definitions

        try:
            report = ingest_definitions()
        except CatalogError as error:
            db.session.rollback()
            for message in error.messages:
                click.echo(message, err=True)
            raise SystemExit(1) from None
        db.session.commit()
        report_ingest(report)

    return click.Command(
        name=upgrade.name,
        params=upgrade.params,
        callback=with_appcontext(upgraded),
        help=upgrade.help,
        short_help=upgrade.short_help,
    )


def _database_group(app: Flask) -> None:
    """Our `db` group: Flask-Migrate's commands, with `upgrade` also ingesting the catalog (a copy, so Flask-Migrate's
    own group object, shared by every app in the process, is left as it is)."""
    migrate_group = app.cli.commands.get("db")
    if migrate_group is None or not isinstance(migrate_group, click.Group):
        return
    group = click.Group(
        name=migrate_group.name,
        commands=dict(migrate_group.commands),
        params=migrate_group.params,
        callback=migrate_group.callback,
        help=migrate_group.help,
    )
    group.add_command(_upgrade_then_ingest(migrate_group.commands["upgrade"]))
    app.cli.add_command(group, "db")


def register_commands(app: Flask) -> None:
    _database_group(app)
    app.cli.add_command(demo_command)
    app.cli.add_command(api_keys_group)
    from app.catalog.cli import catalog_group

    app.cli.add_command(catalog_group)
    from app.cli.runs import connections_group, runs_group

    app.cli.add_command(runs_group)
    app.cli.add_command(connections_group)
    from app.cli.evals import evals_group

    app.cli.add_command(evals_group)
    from app.cli.keys import keys_group
    from app.cli.tools import tools_group

    app.cli.add_command(keys_group)
    from app.cli.worker import worker_command

    app.cli.add_command(tools_group)
    from app.cli.cache import cache_group

    app.cli.add_command(cache_group)

    app.cli.add_command(worker_command)
    from app.cli.start_demo import start_demo_command

    app.cli.add_command(start_demo_command)
