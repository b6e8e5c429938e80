"""`switchboard catalog ...`: validate the definition files and regenerate the cached catalog from them."""

from __future__ import annotations

from pathlib import Path

import click

from app.catalog.loader import DEFINITIONS_DIR, CatalogError, ingest_definitions, load_definition_files
from app.cli import needs_database
from app.extensions import db

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
def catalog_group():
    """The app catalog: definitions and the cached catalog."""


@catalog_group.command("ingest")
@click.option(
    "--definitions-only",
    is_flag=True,
    help="Only read the definition files (the default: ingestion never contacts providers).",
)
@_directory_option
@needs_database
def ingest_command(definitions_only: bool, directory: Path):
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
def validate_command(directory: Path):
    """Validate every app definition without touching the database."""
    try:
        definitions = load_definition_files(directory)
    except CatalogError as error:
        _fail(error)
        return
    click.echo(f"{len(definitions)} app definition(s) are valid.")
