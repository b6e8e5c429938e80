"""Re-indexing a live connection's tools from its provider (issue 28 item 2): by hand from the connection's page,
or on a schedule (`switchboard tools refresh`, e.g. from cron). `tool_index.index_tools` compares each tool's
definition digest with the stored one and quarantines what changed.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from flask import current_app
from sqlalchemy import select

from app.adapters.providers import errors as provider_errors
from app.adapters.providers import mcp_client
from app.catalog.loader import get_app
from app.core.errors import Forbidden, ServiceError
from app.extensions import db
from app.models import ConnectionGrant, Membership, ToolConnection
from app.models.base import utcnow
from app.services.access.effective import CONFIGURE_FORBIDDEN, can_configure
from app.services.activity import record_activity
from app.services.connections import endpoint
from app.services.connections.tool_index import IndexChanges, index_tools
from app.services.gateway.targets import provider_target

NOT_LIVE = "Only a connected connection's tools can be refreshed"


def _grant(connection: ToolConnection) -> ConnectionGrant | None:
    grants = db.session.scalars(
        select(ConnectionGrant).where(
            ConnectionGrant.connection_id == connection.id, ConnectionGrant.status == "active"
        )
    ).all()
    return min(grants, key=lambda g: (g.kind != "organization", g.created_at), default=None)


def refresh_connection_tools(connection: ToolConnection, actor: Membership | None = None) -> IndexChanges:
    """List the provider's tools again as the connection's identity and index them (never a first index: nothing
    changes silently). `actor` None: the schedule. ServiceError when the provider cannot be reached."""
    if actor is not None and not can_configure(actor, connection):
        raise Forbidden(CONFIGURE_FORBIDDEN)
    grant = _grant(connection)
    if connection.status != "active" or grant is None:
        raise ServiceError(NOT_LIVE)
    app_definition = get_app(connection.app_slug)
    target = provider_target(connection.id, grant.id, app_definition)
    try:
        tools = mcp_client.list_tools(
            target.url,
            headers=target.headers,
            timeout=current_app.config["OUTBOUND_TIMEOUT_SECONDS"],
            guard=target.guard,
            transport=target.transport,
            max_tools=current_app.config["PROVIDER_MAX_TOOLS"],
            max_response_bytes=endpoint.max_response_bytes(),
        )
    except provider_errors.ProviderError as err:
        raise ServiceError(f"The provider could not list its tools: {err.message}") from None
    changes = index_tools(connection, tools, first_index=False)
    connection.last_catalog_refresh_at = utcnow()
    connection.tools_changed_at = None
    record_activity(
        company_id=connection.company_id,
        actor_type="user" if actor is not None else "system",
        actor_id=actor.user_id if actor is not None else "tool_refresh",
        action="tool_connection.tools_refreshed",
        entity_type="tool_connection",
        entity_id=connection.id,
        details={
            "toolCount": len(tools),
            "added": changes.added[:50],
            "quarantined": changes.quarantined[:50],
            "renamed": [f"{old} -> {new}" for old, new in changes.renamed[:50]],
            "removed": changes.removed[:50],
        },
    )
    return changes


def connections_due(older_than: timedelta) -> list[uuid.UUID]:
    """Live connections whose tools were last indexed longer ago than `older_than`, or whose provider said its
    tools changed (the schedule's work list)."""
    cutoff = utcnow() - older_than
    return list(
        db.session.scalars(
            select(ToolConnection.id).where(
                ToolConnection.status == "active",
                (ToolConnection.last_catalog_refresh_at.is_(None))
                | (ToolConnection.last_catalog_refresh_at < cutoff)
                | ToolConnection.tools_changed_at.is_not(None),
            )
        )
    )
