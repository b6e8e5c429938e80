"""The Connections list: every connection of the company with whose it is, its status and health, and a link to its
Permissions; filtered by status and owner with query parameters (`status`, `owner`), so it works without script."""

from __future__ import annotations

from flask import render_template, request
from flask.typing import ResponseReturnValue

from app.catalog.loader import get_app, logo_url
from app.services.access.effective import can_configure
from app.services.connections.ownership import OWNER_FILTERS, OwnerFilter, keep, ownership_of
from app.services.connections.settings import list_connections
from app.web.apps import bp
from app.web.context import current_membership

STATUS_LABELS = {"active": "Connected", "draft": "Draft", "disconnected": "Disconnected"}
STATUS_FILTERS = tuple(STATUS_LABELS)
OWNER_LABELS = {"all": "Anyone", "mine": "Mine", "organization": "Organization"}


@bp.get("/connections")
def connections() -> ResponseReturnValue:
    membership = current_membership()
    status = request.args.get("status") or None
    if status not in STATUS_FILTERS:
        status = None
    owner: OwnerFilter = next((o for o in OWNER_FILTERS if o == request.args.get("owner")), "all")
    everything = list_connections(membership.company_id)
    owners = ownership_of(everything)
    rows = []
    apps: dict = {}
    for connection in everything:
        if status and connection.status != status:
            continue
        if not keep(owners[connection.id], owner, membership.user_id):
            continue
        if connection.app_slug not in apps:
            apps[connection.app_slug] = get_app(connection.app_slug)
        app_definition = apps[connection.app_slug]
        rows.append(
            {
                "connection": connection,
                "app_name": app_definition.name if app_definition else connection.app_slug,
                "logo": logo_url(app_definition) if app_definition else None,
                "can_configure": can_configure(membership, connection),
                "owner": owners[connection.id].label(membership.user_id),
            }
        )
    return render_template(
        "apps/connections.html",
        rows=rows,
        total=len(everything),
        status=status,
        owner=owner,
        statuses=list(STATUS_LABELS.items()),
        owners=list(OWNER_LABELS.items()),
    )
