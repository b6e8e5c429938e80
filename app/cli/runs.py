"""`switchboard runs open|close` (task-bound heartbeat runs by hand) and the agent helpers
`switchboard connections search|request`, which call the runtime REST routes with the run's token.

The helpers read only the `PAPERCLIP_RUNTIME_TOOLS_*` environment a run is handed; they fail outside a run.
"""

from __future__ import annotations

import json
import os
import uuid
from typing import Any

import click
import requests
from sqlalchemy import select

from app.cli.database import needs_database
from app.extensions import db


def _uuid_or_fail(value: str, label: str) -> uuid.UUID:
    try:
        return uuid.UUID(value)
    except ValueError:
        raise click.ClickException(f"{label} must be a UUID") from None


@click.group("runs")
def runs_group() -> None:
    """Open and close task-bound heartbeat runs (each with a runtime-tools token)."""


@runs_group.command("open")
@click.option("--agent", "agent_ref", required=True, help="Agent id.")
@click.option("--issue", "issue_ref", required=True, help="Task id or identifier (e.g. ACME-1).")
@click.option("--responsible", "responsible_email", default=None, help="Email of the responsible person.")
@click.option("--json", "as_json", is_flag=True, help="Print the run, token and environment as JSON.")
@needs_database
def runs_open(agent_ref: str, issue_ref: str, responsible_email: str | None, as_json: bool) -> None:
    """Start a running heartbeat run of AGENT on ISSUE and print its runtime-tools token and environment."""
    from app.models import Agent, Issue, User
    from app.services.runs.runtime_tools import runtime_env
    from app.services.runs.tokens import mint_run_token, open_run

    agent = db.session.get(Agent, _uuid_or_fail(agent_ref, "--agent"))
    if agent is None:
        raise click.ClickException("No such agent")
    try:
        issue = db.session.get(Issue, uuid.UUID(issue_ref))
    except ValueError:
        issue = db.session.scalar(
            select(Issue).where(Issue.company_id == agent.company_id, Issue.identifier == issue_ref)
        )
    if issue is None or issue.company_id != agent.company_id:
        raise click.ClickException("No such task in the agent's company")
    responsible_id = None
    if responsible_email:
        user = db.session.scalar(select(User).where(User.email == responsible_email.strip().lower()))
        if user is None:
            raise click.ClickException(f"No user with email {responsible_email}")
        responsible_id = user.id
    run = open_run(agent, issue, responsible_id)
    minted = mint_run_token(run)
    db.session.commit()
    data: dict[str, Any] = {
        "runId": str(run.id),
        "token": minted.token,
        "expiresAt": minted.expires_at_iso,
        "env": runtime_env(minted),
    }
    if as_json:
        click.echo(json.dumps(data, indent=2))
    else:
        click.echo(f"runId: {data['runId']}")
        click.echo(f"expiresAt: {data['expiresAt']}")
        for key, value in data["env"].items():
            click.echo(f"export {key}={json.dumps(value)}")


@runs_group.command("close")
@click.argument("run_id")
@needs_database
def runs_close(run_id: str) -> None:
    """Mark a run succeeded (its runtime-tools token stops working) and start the next wake waiting on the task."""
    from app.core.errors import ServiceError
    from app.services.runs.lifecycle import close_run

    try:
        run = close_run(_uuid_or_fail(run_id, "RUN_ID"))
    except ServiceError as err:
        raise click.ClickException(err.message) from None
    db.session.commit()
    click.echo(f"{run.id}: {run.status}")


@click.group("connections")
def connections_group() -> None:
    """Agent helpers for the connection runtime tools (need the PAPERCLIP_RUNTIME_TOOLS_* environment)."""


def _call(url_var: str, body: dict) -> None:
    url = os.environ.get(url_var, "").strip()
    token = os.environ.get("PAPERCLIP_RUNTIME_TOOLS_TOKEN", "").strip()
    if not url or not token:
        raise click.ClickException(
            f"{url_var} and PAPERCLIP_RUNTIME_TOOLS_TOKEN are not set: run this inside an active heartbeat run"
        )
    try:
        response = requests.post(url, json=body, headers={"Authorization": f"Bearer {token}"}, timeout=30)
    except requests.RequestException as err:
        raise click.ClickException(f"Could not reach the runtime tools: {err.__class__.__name__}") from None
    try:
        data = response.json()
    except ValueError:
        data = {"error": response.text[:500]}
    click.echo(json.dumps(data, indent=2))
    if response.status_code >= 400:
        raise SystemExit(1)


@connections_group.command("search")
@click.argument("query", nargs=-1)
def connections_search(query: tuple[str, ...]) -> None:
    """Search connectable services and this run's access state for each."""
    _call("PAPERCLIP_RUNTIME_TOOLS_CONNECTIONS_SEARCH_URL", {"query": " ".join(query)})


@connections_group.command("request")
@click.argument("service")
def connections_request(service: str) -> None:
    """Ask the responsible person to connect SERVICE (a slug returned by search)."""
    _call("PAPERCLIP_RUNTIME_TOOLS_CONNECTION_REQUEST_URL", {"service": service})
