"""A provider's `notifications/tools/list_changed`, from the MCP client's loop thread to the connection it concerns.

The client session that receives the notification knows only the provider's URL (sessions are pooled per URL and
credential, with no database at hand), so the URL is noted in this process (`adapters.providers.client`); the gateway call that used that URL
takes the note once the provider has answered and marks its connection (`tool_connections.tools_changed_at`), and
the worker's `tools` job re-indexes marked connections (`workers.tool_refresh`). The mark is in the database, so
any worker process picks it up.
"""

from __future__ import annotations

import uuid

from sqlalchemy import update

from app.adapters.providers.client import CLIENT
from app.extensions import db
from app.models import ToolConnection
from app.models.base import utcnow


def take_tools_changed(server_url: str) -> bool:
    """Whether the provider at this URL said its tools changed since the last take (and forget it)."""
    return CLIENT.take_tools_changed(server_url)


def mark_tools_changed(connection_id: uuid.UUID) -> None:
    """Mark the connection for re-indexing, durable at once (one autocommitted UPDATE: the caller holds no
    transaction, as after a gateway call). It changes nothing agents see, so the access revision stays."""
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(
            update(ToolConnection).where(ToolConnection.id == connection_id).values(tools_changed_at=utcnow())
        )
