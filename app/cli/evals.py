"""`switchboard evals run`: connection evaluations against a configured agent (`app.evals`)."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import click

from app.cli.database import needs_database
from app.extensions import db


@click.group("evals")
def evals_group() -> None:
    """Connection evaluations: natural-prompt cases scored on observed calls and persisted state."""


@evals_group.command("run")
@click.option(
    "--agent", "agent_id", required=True, help="The agent's id (its adapter and model key are used)."
)
@click.option(
    "--cases",
    "cases_path",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="A cases file (JSON); default: the built-in cases (app/evals/default_cases.json).",
)
@click.option(
    "--responsible", "responsible_email", default=None, help="Email of the person cards are addressed to."
)
@click.option(
    "--json-out",
    "json_out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=Path("evals-report.json"),
    show_default=True,
    help="Where the JSON report is written.",
)
@needs_database
def evals_run(agent_id: str, cases_path: Path | None, responsible_email: str | None, json_out: Path) -> None:
    """Run each case on a task of its own, print a table and write a JSON report; exit 1 when a case failed."""
    from app.evals import EvalError, load_cases, report, run_evaluation, table
    from app.models import Agent

    try:
        cases = load_cases(cases_path)
        results = run_evaluation(agent_id, cases, responsible_email)
    except EvalError as exc:
        raise click.ClickException(str(exc)) from None
    agent = db.session.get(Agent, uuid.UUID(agent_id))
    data = report(agent, results)
    json_out.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    click.echo(table(results))
    summary = data["summary"]
    click.echo(
        f"\n{summary['passed']} passed, {summary['failed']} failed, {summary['skipped']} skipped, "
        f"{summary['error']} errors. Report: {json_out}"
    )
    if summary["failed"] or summary["error"]:
        raise SystemExit(1)
