"""The `switchboard` command: the app's Flask CLI plus our own commands."""

from __future__ import annotations

import json

import click
from flask.cli import FlaskGroup, with_appcontext

from app.extensions import db


def _create_app():
    from app import create_app

    return create_app()


@click.group(cls=FlaskGroup, create_app=_create_app)
def main():
    """Switchboard: connect AI agents to the services they need."""


def _emit(data: dict, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        for key, value in data.items():
            click.echo(f"{key}: {value}")


@click.command("demo")
@click.option("--json", "as_json", is_flag=True, help="Print the demo records as JSON.")
@with_appcontext
def demo_command(as_json: bool):
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


@click.group("api-keys")
def api_keys_group():
    """Personal board API keys."""


@api_keys_group.command("create")
@click.option("--email", required=True)
@click.option("--name", default="CLI key")
@click.option("--json", "as_json", is_flag=True)
@with_appcontext
def api_keys_create(email: str, name: str, as_json: bool):
    """Create an API key for a person and print it once."""
    from app.services.accounts import create_api_key, find_user_by_email

    user = find_user_by_email(email)
    if user is None:
        raise click.ClickException(f"No user with email {email}")
    key, token = create_api_key(user, name)
    db.session.commit()
    _emit({"token": token, "id": str(key.id), "name": key.name}, as_json)


def register_commands(app) -> None:
    app.cli.add_command(demo_command)
    app.cli.add_command(api_keys_group)
    from app.catalog.cli import catalog_group

    app.cli.add_command(catalog_group)
    from app.runs_cli import connections_group, runs_group

    app.cli.add_command(runs_group)
    app.cli.add_command(connections_group)
    from app.worker_cli import worker_command

    app.cli.add_command(worker_command)
