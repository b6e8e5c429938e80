"""The Connections list: every connection of the company with its status, health and a link to its Permissions."""

from __future__ import annotations

from flask import render_template
from flask.typing import ResponseReturnValue

from app.catalog.loader import get_app, logo_url
from app.services.access.effective import can_configure
from app.services.connections.settings import list_connections
from app.web.apps import bp
from app.web.context import current_membership


@bp.get("/connections")
def connections() -> ResponseReturnValue:
    membership = current_membership()
    rows = []
    apps: dict = {}
    for connection in list_connections(membership.company_id):
        if connection.app_slug not in apps:
            apps[connection.app_slug] = get_app(connection.app_slug)
        app_definition = apps[connection.app_slug]
        rows.append(
            {
                "connection": connection,
                "app_name": app_definition.name if app_definition else connection.app_slug,
                "logo": logo_url(app_definition) if app_definition else None,
                "can_configure": can_configure(membership, connection),
            }
        )
    return render_template("apps/connections.html", rows=rows)
