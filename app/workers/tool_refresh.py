"""The worker's `tools` job: re-index the connections whose provider said `notifications/tools/list_changed`
(`connections.tool_changes` marks them), one transaction per connection, so a changed tool is quarantined for
review without waiting for the scheduled refresh."""

from __future__ import annotations

import logging

from sqlalchemy import select

from app.core.errors import ServiceError
from app.extensions import db
from app.models import ToolConnection
from app.services.gateway.tool_refresh import refresh_connection_tools

log = logging.getLogger(__name__)
BATCH = 20


def refresh_changed_connections(limit: int = BATCH) -> int:
    """Re-index up to `limit` marked connections; returns how many were refreshed. A connection that cannot be
    refreshed now (provider down, not live) loses its mark: the schedule refreshes it later."""
    ids = list(
        db.session.scalars(
            select(ToolConnection.id)
            .where(ToolConnection.tools_changed_at.is_not(None))
            .order_by(ToolConnection.tools_changed_at)
            .limit(limit)
        )
    )
    db.session.rollback()
    done = 0
    for connection_id in ids:
        connection = db.session.get(ToolConnection, connection_id)
        if connection is None:
            continue
        try:
            refresh_connection_tools(connection)
        except ServiceError as err:
            db.session.rollback()
            log.warning(
                "tools of connection %s not refreshed after list_changed: %s", connection_id, err.message
            )
        else:
            done += 1
            connection = db.session.get(ToolConnection, connection_id)
            if connection is not None:
                connection.tools_changed_at = None
        db.session.commit()
    return done
