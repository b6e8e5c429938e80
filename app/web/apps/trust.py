"""The connection page's trust sections: changed tools waiting for review (with Refresh tools, Accept
and Accept all) and the "Always allow" trust rules (with Revoke).

Each section is a component (`apps/_tool_review.html`, `apps/_trust_rules.html`): an htmx post gets the component
back, a plain post a 303 to the page. The services own every rule: who may refresh, accept or revoke.
"""

from __future__ import annotations

from dataclasses import dataclass

from flask import abort, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from sqlalchemy import select

from app.core.errors import ServiceError
from app.extensions import db, htmx
from app.models import Issue, Membership, ToolConnection, ToolTrustRule
from app.services.access.effective import can_configure, can_manage_connections
from app.services.agents import agent_names
from app.services.connections import tool_review, trust_rules
from app.services.gateway.tool_refresh import refresh_connection_tools
from app.web.apps import bp
from app.web.context import load_scoped
from app.web.forms import EmptyForm


def load_connection(connection_id: str) -> tuple[ToolConnection, Membership]:
    connection, membership = load_scoped(ToolConnection, connection_id)
    if connection.status == "archived":
        abort(404)
    return connection, membership


def back_to_page(connection: ToolConnection) -> ResponseReturnValue:
    return redirect(url_for("apps.permissions", connection_id=connection.id), code=303)


@dataclass(frozen=True)
class RuleRow:
    rule: ToolTrustRule
    agent_name: str
    issue_label: str | None
    state: str
    revocable: bool  # live, and this person may revoke it (`trust_rules.revoke_rule` says the same)


def rule_rows(connection: ToolConnection, membership: Membership) -> list[RuleRow]:
    rules = trust_rules.rules_of_connection(connection)
    names = {a.id: a.name for a in agent_names(connection.company_id)}
    issue_ids = {r.issue_id for r in rules if r.issue_id}
    labels: dict = {}
    if issue_ids:
        found = db.session.execute(select(Issue.id, Issue.identifier).where(Issue.id.in_(issue_ids)))
        labels = {row.id: row.identifier for row in found}
    configure = can_configure(membership, connection)
    rows = []
    for r in rules:
        state = trust_rules.rule_state(r)
        may_revoke = membership.has_write_access and (configure or r.created_by_user_id == membership.user_id)
        label = labels.get(r.issue_id) if r.issue_id else None
        rows.append(
            RuleRow(r, names.get(r.agent_id, "an agent"), label, state, state == "active" and may_revoke)
        )
    return rows


def trust_context(connection: ToolConnection, membership: Membership) -> dict:
    """What the page's two trust sections need (its `page_context` adds these)."""
    return {
        "tool_changes": tool_review.pending_changes(connection),
        "can_review_tools": can_manage_connections(membership),
        "can_refresh_tools": can_configure(membership, connection) and connection.status == "active",
        "trust_rule_rows": rule_rows(connection, membership),
    }


def _review_section(
    connection: ToolConnection, membership: Membership, status: int = 200, message: str | None = None
) -> ResponseReturnValue:
    return render_template(
        "apps/_tool_review.html",
        connection=connection,
        refresh_message=message,
        refresh_failed=status != 200,
        **trust_context(connection, membership),
    ), status


def _checked(connection_id: str) -> tuple[ToolConnection, Membership]:
    connection, membership = load_connection(connection_id)
    if not EmptyForm().validate():
        abort(400)
    return connection, membership


@bp.post("/apps/<connection_id>/tools/refresh")
def refresh_tools(connection_id: str) -> ResponseReturnValue:
    connection, membership = _checked(connection_id)
    try:
        changes = refresh_connection_tools(connection, membership)
    except ServiceError as err:
        if err.status == 403:
            raise
        db.session.rollback()
        if htmx:
            return _review_section(connection, membership, 422, err.message)
        flash(err.message)
        return back_to_page(connection)
    summary = (
        f"Tools refreshed: {len(changes.added)} new, {len(changes.quarantined)} changed, "
        f"{len(changes.renamed)} renamed, {len(changes.removed)} removed."
    )
    if htmx:
        return _review_section(connection, membership, message=summary)
    flash(summary)
    return back_to_page(connection)


@bp.post("/apps/<connection_id>/tools/review/accept")
def accept_tool_change(connection_id: str) -> ResponseReturnValue:
    connection, membership = _checked(connection_id)
    tool_review.accept_change(membership, connection, request.form.get("tool", ""))
    return _review_section(connection, membership) if htmx else back_to_page(connection)


@bp.post("/apps/<connection_id>/tools/review/accept-all")
def accept_all_tool_changes(connection_id: str) -> ResponseReturnValue:
    connection, membership = _checked(connection_id)
    tool_review.accept_all(membership, connection)
    return _review_section(connection, membership) if htmx else back_to_page(connection)


@bp.post("/apps/<connection_id>/trust-rules/<rule_id>/revoke")
def revoke_trust_rule(connection_id: str, rule_id: str) -> ResponseReturnValue:
    connection, membership = _checked(connection_id)
    trust_rules.revoke_rule(membership, connection, trust_rules.load_rule(connection, rule_id))
    if htmx:
        return render_template(
            "apps/_trust_rules.html",
            connection=connection,
            trust_rule_rows=rule_rows(connection, membership),
        )
    return back_to_page(connection)
