"""Reviewing quarantined tools: what changed, and accepting it one tool at a time or all at once.

Only a person holding `tools:manage_connections` accepts: the gateway serves the accepted definition from then on.
Until then the tool is neither listed nor callable, and the gateway keeps the reviewed definition (never the
provider's unreviewed one) in the row's columns.
"""

from __future__ import annotations

from sqlalchemy import select

from app.core.errors import Forbidden, NotFound
from app.extensions import db
from app.models import ConnectionTool, Membership, ToolConnection
from app.services.access.effective import can_manage_connections
from app.services.activity import record_activity
from app.services.connections.tool_definitions import ToolChange, change_of
from app.services.connections.tool_index import accept_pending

REVIEW_FORBIDDEN = (
    "Only a person who can manage connections (tools:manage_connections) can accept changed tools"
)


def quarantined_tools(connection: ToolConnection) -> list[ConnectionTool]:
    return list(
        db.session.scalars(
            select(ConnectionTool)
            .where(
                ConnectionTool.company_id == connection.company_id,
                ConnectionTool.connection_id == connection.id,
                ConnectionTool.status == "quarantined",
            )
            .order_by(ConnectionTool.name)
        )
    )


def pending_changes(connection: ToolConnection) -> list[ToolChange]:
    """The readable diffs of the connection's quarantined tools (one query for the tools, one for renamed ones)."""
    rows = quarantined_tools(connection)
    old_names = {(r.pending_definition or {}).get("renamedFrom") for r in rows} - {None}
    before = {
        r.name: r
        for r in (
            db.session.scalars(
                select(ConnectionTool).where(
                    ConnectionTool.connection_id == connection.id, ConnectionTool.name.in_(old_names)
                )
            )
            if old_names
            else []
        )
    }
    return [change_of(r, before.get((r.pending_definition or {}).get("renamedFrom") or "")) for r in rows]


def _accept(actor: Membership, connection: ToolConnection, rows: list[ConnectionTool]) -> list[str]:
    if not can_manage_connections(actor) or actor.company_id != connection.company_id:
        raise Forbidden(REVIEW_FORBIDDEN)
    accepted = []
    for row in rows:
        digest = (row.pending_definition or {}).get("digest")
        renamed_from = (row.pending_definition or {}).get("renamedFrom")
        accept_pending(row)
        accepted.append(row.name)
        record_activity(
            company_id=connection.company_id,
            actor_type="user",
            actor_id=actor.user_id,
            action="tool_definition.accepted",
            entity_type="tool_connection",
            entity_id=connection.id,
            details={"tool": row.name, "definitionDigest": digest, "renamedFrom": renamed_from},
        )
    return accepted


def accept_change(actor: Membership, connection: ToolConnection, tool_name: str) -> list[str]:
    row = next((r for r in quarantined_tools(connection) if r.name == tool_name), None)
    if row is None:
        raise NotFound("No changed tool of that name waits for review")
    return _accept(actor, connection, [row])


def accept_all(actor: Membership, connection: ToolConnection) -> list[str]:
    return _accept(actor, connection, quarantined_tools(connection))
