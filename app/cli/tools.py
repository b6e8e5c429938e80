"""`switchboard tools refresh`: re-index live connections' tools on a schedule (cron, a systemd timer), so a
provider's quiet change to a tool is quarantined for review. One transaction per connection: a
provider that cannot be reached is reported and the others are still refreshed."""

from __future__ import annotations

import uuid
from datetime import timedelta

import click

from app.core.errors import ServiceError
from app.extensions import db
from app.models import ToolConnection
from app.services.gateway.tool_refresh import connections_due, refresh_connection_tools


@click.group("tools")
def tools_group() -> None:
    """The tool index of connections."""


@tools_group.command("refresh")
@click.option("--connection", "connection_id", default=None, help="Only this connection (its id).")
@click.option(
    "--older-than-minutes",
    default=60,
    show_default=True,
    type=click.IntRange(min=0),
    help="Refresh connections whose tools were indexed longer ago than this.",
)
def refresh_command(connection_id: str | None, older_than_minutes: int) -> None:
    """Re-index tools: changed tools are quarantined until a person accepts them on the connection's page."""
    if connection_id is not None:
        try:
            ids = [uuid.UUID(connection_id)]
        except ValueError:
            raise click.BadParameter("not a connection id", param_hint="--connection") from None
    else:
        ids = connections_due(timedelta(minutes=older_than_minutes))
    failed = 0
    for cid in ids:
        connection = db.session.get(ToolConnection, cid)
        if connection is None:
            raise click.ClickException(f"{cid}: no such connection")
        try:
            changes = refresh_connection_tools(connection)
        except ServiceError as err:
            db.session.rollback()
            failed += 1
            click.echo(f"{cid}: not refreshed: {err.message}")
            continue
        db.session.commit()
        click.echo(
            f"{cid}: {len(changes.added)} new, {len(changes.quarantined)} changed, {len(changes.renamed)} renamed, "
            f"{len(changes.removed)} removed"
        )
    if failed:
        raise SystemExit(1)
