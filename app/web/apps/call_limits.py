"""The Call limits section of a connection's Permissions page: its rate limits and loop breaker, and how many calls
they refused (`services.gateway.limits` owns the rules and the figures)."""

from __future__ import annotations

from flask import render_template, request
from flask.typing import ResponseReturnValue

from app.core.errors import Forbidden, ValidationFailed
from app.extensions import db, htmx
from app.services.gateway import limits as call_limits
from app.web.apps import bp
from app.web.apps.permissions import back_to_page, load_connection, render_page


@bp.post("/apps/<connection_id>/limits")
def save_call_limits(connection_id: str) -> ResponseReturnValue:
    connection, membership, app_definition = load_connection(connection_id)
    values = {name: request.form.get(name, "") for name in call_limits.field_names()}
    status, errors = 200, {}
    try:
        call_limits.set_call_limits(membership, connection, values)
    except ValidationFailed as err:
        status, errors = 422, err.field_messages()
    except Forbidden as err:
        status, errors = 403, {"": err.message}
    if status == 200:
        if not htmx:
            return back_to_page(connection)
        state = call_limits.limits_state(connection, saved=True)
    else:
        db.session.rollback()
        state = call_limits.limits_state(connection, values=values, errors=errors)
    if htmx:
        return render_template(
            "apps/_call_limits.html", connection=connection, limits=state, can_configure=True
        ), status
    return render_page(connection, membership, app_definition, status, limits=state)


@bp.context_processor
def limit_labels() -> dict:
    """The section's rows and columns, for the page and the fragment alike."""
    return {"limit_scopes": call_limits.SCOPE_LABELS, "limit_windows": tuple(call_limits.WINDOWS)}
