"""The connection page's "Why can't an agent use it?" (the explainer) and "Dry run a call" (the policy dry run).

Both answer for runs the signed-in person is responsible for, change nothing and call no provider. htmx gets the
answer's partial alone (`apps/_access_explanation.html`, `apps/_dry_run.html`); without JavaScript the whole page
comes back with the answer in place.
"""

from __future__ import annotations

import json

from flask import abort, render_template, request
from flask.typing import ResponseReturnValue

from app.extensions import db, htmx
from app.models import Agent, ToolConnection
from app.services.access.explain import explain_access
from app.services.gateway.dry_run import dry_run_call
from app.web.apps import bp
from app.web.apps.permissions import load_connection, render_page
from app.web.context import parse_uuid

TOOL_NAME_MAX = 200
ARGUMENTS_MAX = 20_000
ARGUMENTS_NOT_AN_OBJECT = 'Arguments must be a JSON object, such as {"content": "hello"}.'


def agent_of(connection: ToolConnection, value: object) -> Agent:
    """An agent of the connection's company named by a form value, else 404."""
    agent = db.session.get(Agent, parse_uuid(value))
    if agent is None or agent.company_id != connection.company_id:
        abort(404)
    return agent


def tool_of(value: str | None) -> str | None:
    name = (value or "").strip()
    return name[:TOOL_NAME_MAX] or None


@bp.get("/apps/<connection_id>/permissions/explain", endpoint="explain_access")
def explain_access_view(connection_id: str) -> ResponseReturnValue:
    connection, membership, app_definition = load_connection(connection_id)
    agent = agent_of(connection, request.args.get("agent"))
    explanation = explain_access(agent, membership.user_id, connection, tool_of(request.args.get("tool")))
    if htmx:
        return render_template("apps/_access_explanation.html", explanation=explanation)
    return render_page(connection, membership, app_definition, explanation=explanation)


@bp.post("/apps/<connection_id>/permissions/dry-run")
def dry_run(connection_id: str) -> ResponseReturnValue:
    """The CSRF token is checked app-wide (`CSRFProtect`) before this runs."""
    connection, membership, app_definition = load_connection(connection_id)
    agent = agent_of(connection, request.form.get("agent"))
    tool = tool_of(request.form.get("tool"))
    text = (request.form.get("arguments") or "").strip() or "{}"
    arguments = None
    if len(text) <= ARGUMENTS_MAX:
        try:
            arguments = json.loads(text)
        except ValueError:
            arguments = None
    answer, error, status = None, None, 200
    if tool is None or not isinstance(arguments, dict):
        error, status = ("Choose a tool." if tool is None else ARGUMENTS_NOT_AN_OBJECT), 422
    else:
        answer = dry_run_call(agent, membership.user_id, connection, tool, arguments)
    states = {"dry_run": answer, "dry_run_error": error, "dry_run_arguments": text[:ARGUMENTS_MAX]}
    if htmx:
        return render_template("apps/_dry_run.html", **states), status
    return render_page(connection, membership, app_definition, status, **states)
