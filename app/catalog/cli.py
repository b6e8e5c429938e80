"""`switchboard catalog ...`: validate the definition files, regenerate the cached catalog from them, and import
MCP Registry server.json documents as new definitions."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from app.catalog.loader import (
    DEFINITIONS_DIR,
    CatalogError,
    definition_directories,
    extra_definitions_dir,
    ingest_definitions,
    load_definition_files,
)
from app.cli.database import needs_database
from app.extensions import db

if TYPE_CHECKING:
    from app.catalog.registry_import import AuthWithoutKey

_directory_option = click.option(
    "--directory",
    type=click.Path(file_okay=False, path_type=Path),
    default=DEFINITIONS_DIR,
    show_default=True,
    help="Folder holding the <slug>.json app definitions.",
)


def _fail(error: CatalogError) -> None:
    for message in error.messages:
        click.echo(message, err=True)
    click.echo(f"{len(error.messages)} problem(s); nothing was written.", err=True)
    raise SystemExit(1)


@click.group("catalog")
def catalog_group() -> None:
    """The app catalog: definitions and the cached catalog."""


@catalog_group.command("ingest")
@click.option(
    "--definitions-only",
    is_flag=True,
    help="Only read the definition files (the default: ingestion never contacts providers).",
)
@_directory_option
@needs_database
def ingest_command(definitions_only: bool, directory: Path) -> None:
    """Validate every app definition and regenerate the cached catalog from them."""
    try:
        report = ingest_definitions(directory)
    except CatalogError as error:
        db.session.rollback()
        _fail(error)
        return
    db.session.commit()
    report_ingest(report)


def report_ingest(report: dict[str, list[str]]) -> None:
    counts = ", ".join(f"{len(report[kind])} {kind}" for kind in ("added", "updated", "removed", "unchanged"))
    click.echo(f"Catalog ingested: {counts}.")
    for kind in ("added", "updated", "removed"):
        for slug in report[kind]:
            click.echo(f"  {kind}: {slug}")


@catalog_group.command("validate")
@_directory_option
def validate_command(directory: Path) -> None:
    """Validate every app definition without touching the database."""
    try:
        definitions = load_definition_files(directory)
    except CatalogError as error:
        _fail(error)
        return
    click.echo(f"{len(definitions)} app definition(s) are valid.")


@catalog_group.command("import")
@click.argument("source", metavar="FILE_OR_URL")
@click.option(
    "--slug", default=None, help="The app's slug (default: from the server name, e.g. remote-weather)."
)
@click.option(
    "--auth",
    "auth_without_key",
    type=click.Choice(["oauth", "none"]),
    default="oauth",
    show_default=True,
    help="How remotes without a secret header sign in.",
)
@click.option("--force", is_flag=True, help="Replace an earlier import of the same slug in the same folder.")
@needs_database
def import_command(source: str, slug: str | None, auth_without_key: AuthWithoutKey, force: bool) -> None:
    """Turn an MCP Registry server.json (a file or an http(s) URL) into an app definition and ingest it.

    The definition is written to SWITCHBOARD_CATALOG_EXTRA_DIR when set, else to app/catalog/definitions/.
    """
    from app.catalog.registry_import import ImportRefused, import_document, read_server_json, write_definition

    directory = extra_definitions_dir() or DEFINITIONS_DIR
    existing = {
        p.stem for d in definition_directories(DEFINITIONS_DIR) if d.is_dir() for p in d.glob("*.json")
    }
    try:
        document = read_server_json(source)
        definition, notes = import_document(document, slug=slug, auth_without_key=auth_without_key)
        path = write_definition(definition, directory, existing, force=force)
    except ImportRefused as refused:
        for message in refused.messages:
            click.echo(message, err=True)
        click.echo("Nothing was imported.", err=True)
        raise SystemExit(1) from None
    labels = ", ".join(m["label"] for m in definition["methods"])
    click.echo(f"Imported {document['name']} as {definition['slug']!r} ({labels}): {path}")
    for note in notes:
        click.echo(f"  note: {note}")
    try:
        report = ingest_definitions()
    except CatalogError as error:
        db.session.rollback()
        path.unlink()
        _fail(error)
        return
    db.session.commit()
    report_ingest(report)
