"""Managing a connection: disable / enable, disconnect and delete (each with its confirmation), from the Connections
list and the Permissions page. Button-only forms carry CSRF (`EmptyForm`); the services own every rule and record
activity; the unit of work commits. Without JavaScript everything is a plain form and a 303.
"""

from __future__ import annotations

from flask import abort, flash, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from app.catalog.loader import get_app
from app.catalog.schema import AppDefinition
from app.core.errors import Conflict
from app.models import Membership, ToolConnection
from app.services.access.effective import can_configure
from app.services.management import lifecycle
from app.services.management.impact import connection_impact
from app.web.apps import bp
from app.web.apps.permissions import require_configure
from app.web.context import load_scoped
from app.web.forms import EmptyForm

# Where a management form sends the person back to: the page it was posted from (never a URL from the form).
BACK_TO = {"connections": "apps.connections", "permissions": "apps.permissions"}


def _load(connection_id: str) -> tuple[ToolConnection, Membership, AppDefinition | None]:
    connection, membership = load_scoped(ToolConnection, connection_id)
    if connection.status == "archived":
        abort(404)
    return connection, membership, get_app(connection.app_slug)


def _back(connection: ToolConnection) -> ResponseReturnValue:
    target = BACK_TO.get(request.form.get("back", ""), "apps.permissions")
    if target == "apps.connections":
        return redirect(url_for(target), code=303)
    return redirect(url_for(target, connection_id=connection.id), code=303)


def _checked_post(connection_id: str) -> tuple[ToolConnection, Membership, AppDefinition | None]:
    connection, membership, app_definition = _load(connection_id)
    require_configure(membership, connection)
    if not EmptyForm().validate():
        abort(400)
    return connection, membership, app_definition


@bp.post("/apps/<connection_id>/disable")
def disable(connection_id: str) -> ResponseReturnValue:
    connection, membership, _app = _checked_post(connection_id)
    if lifecycle.set_enabled(membership, connection, False):
        flash(f"{connection.name} is disabled. Agents no longer see its tools.")
    return _back(connection)


@bp.post("/apps/<connection_id>/enable")
def enable(connection_id: str) -> ResponseReturnValue:
    connection, membership, _app = _checked_post(connection_id)
    if lifecycle.set_enabled(membership, connection, True):
        flash(f"{connection.name} is enabled again.")
    return _back(connection)


def _confirm_page(
    template: str,
    connection: ToolConnection,
    membership: Membership,
    app_definition: AppDefinition | None,
    status: int = 200,
    error: str | None = None,
) -> ResponseReturnValue:
    impact = connection_impact(connection)
    return render_template(
        template,
        connection=connection,
        app_definition=app_definition,
        impact=impact,
        can_configure=can_configure(membership, connection),
        form=EmptyForm(),
        error=error,
    ), status


@bp.get("/apps/<connection_id>/disconnect")
def disconnect_confirm(connection_id: str) -> ResponseReturnValue:
    connection, membership, app_definition = _load(connection_id)
    require_configure(membership, connection)
    if connection.status != "active":
        return redirect(url_for("apps.permissions", connection_id=connection.id), code=303)
    return _confirm_page("apps/disconnect.html", connection, membership, app_definition)


@bp.post("/apps/<connection_id>/disconnect")
def disconnect(connection_id: str) -> ResponseReturnValue:
    connection, membership, _app = _checked_post(connection_id)
    revocations = lifecycle.disconnect_connection(membership, connection)
    told = all(r.outcome in ("revoked", "no_token") for r in revocations)
    note = (
        "" if told else f" {_app.name if _app else 'The provider'} could not be told to revoke the sign-in."
    )
    flash(f"{connection.name} is disconnected. Its credentials are deleted.{note}")
    return _back(connection)


@bp.get("/apps/<connection_id>/delete")
def delete_confirm(connection_id: str) -> ResponseReturnValue:
    connection, membership, app_definition = _load(connection_id)
    require_configure(membership, connection)
    return _confirm_page("apps/delete.html", connection, membership, app_definition)


@bp.post("/apps/<connection_id>/delete")
def delete(connection_id: str) -> ResponseReturnValue:
    connection, membership, app_definition = _checked_post(connection_id)
    name = connection.name
    try:
        lifecycle.delete_connection(membership, connection)
    except Conflict as err:
        return _confirm_page("apps/delete.html", connection, membership, app_definition, 409, err.message)
    flash(f"{name} is deleted.")
    return redirect(url_for("apps.connections"), code=303)
