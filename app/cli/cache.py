"""`switchboard cache refresh`: make every process of every instance on this database answer from the database again
after a change made outside the app (an SQL fix, a restore)."""

from __future__ import annotations

import click

from app.cli.database import needs_database
from app.extensions import db


@click.group("cache")
def cache_group() -> None:
    """The per-process caches every instance keeps."""


@cache_group.command("refresh")
@needs_database
def refresh_command() -> None:
    """Raise every company's access revision (and wake the workers): each process's next agent request reads
    connections, grants, tools, policies and the catalog from the database."""
    from app.services.access.revision import refresh_every_company

    companies = refresh_every_company()
    db.session.commit()
    click.echo(
        f"cache: raised the access revision of {companies} compan{'y' if companies == 1 else 'ies'}; every "
        "process answers agents' next requests from the database"
    )
