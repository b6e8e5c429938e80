"""Settings, Connected assistants: the person's assistants (owners and admins: every one in the company), each with
its last use and access, and Disconnect, which revokes all of its tokens at once."""

from __future__ import annotations

from flask import redirect, render_template, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user, login_required

from app.services.assistants import grants
from app.web.assistant_oauth import bp
from app.web.context import current_membership, parse_uuid
from app.web.forms import EmptyForm


@bp.get("/settings/assistants")
@login_required
def connected() -> ResponseReturnValue:
    membership = current_membership()
    return render_template(
        "assistants/connected.html",
        rows=grants.connected_assistants(membership),
        sees_all=membership.role in grants.ADMIN_ROLES,
        form=EmptyForm(formdata=None),
    )


@bp.post("/settings/assistants/<grant_id>/disconnect")
@login_required
def disconnect(grant_id: str) -> ResponseReturnValue:
    membership = current_membership()
    grants.disconnect(grants.grant_for(membership, parse_uuid(grant_id)), current_user)
    return redirect(url_for("assistant_oauth.connected"), code=303)
