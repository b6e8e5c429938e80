"""The read-only "From connections" section of an agent's Instructions tab.

Lists the agent's installed connections (company-wide or for this agent) that are active and enabled and carry an
instructions setting, with notes when the setting is turned off or the connection's required public configuration is
missing (agents then receive nothing from it). Whether a given task gets them depends on the task's responsible
person and action permissions, which the explanation above the list says.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from flask import url_for

from app.catalog.loader import get_app
from app.extensions import db
from app.models import Agent, ToolConnection
from app.services.access.effective import installed_connections_query, live_clause
from app.services.connections.instructions import instruction_context, parse_setting


@dataclass(frozen=True)
class ConnectionInstructionsItem:
    connection_id: uuid.UUID
    name: str
    app_name: str
    url: str
    text: str
    disabled: bool
    incomplete: bool


def agent_connection_instructions(agent: Agent) -> list[ConnectionInstructionsItem]:
    """The agent's connection instructions, sorted by connection name (one query, plus the cached catalog)."""
    query = installed_connections_query(agent.company_id, agent.id).where(live_clause())
    items = []
    apps: dict = {}
    for connection in db.session.scalars(query.order_by(ToolConnection.name, ToolConnection.id)):
        setting = parse_setting(connection.agent_instructions)
        if setting is None:
            continue
        if connection.app_slug not in apps:
            apps[connection.app_slug] = get_app(connection.app_slug)
        app_definition = apps[connection.app_slug]
        items.append(
            ConnectionInstructionsItem(
                connection_id=connection.id,
                name=connection.name,
                app_name=app_definition.name if app_definition else connection.app_slug,
                url=url_for("apps.permissions", connection_id=connection.id),
                text=setting.text,
                disabled=not setting.enabled,
                incomplete=instruction_context(app_definition, connection.config) is None,
            )
        )
    return items
