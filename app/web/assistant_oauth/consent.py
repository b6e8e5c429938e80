"""The pages a person signs an assistant in on: the consent page of the authorization-code flow (`/authorize`) and
the device page (`/device`) where a CLI's user code is entered. Only a signed-in member consents; the company is
pinned to one of theirs; a viewer's assistant is read-only. Forms carry the CSRF token (the request hook checks it).
"""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

from authlib.oauth2.rfc6749.errors import OAuth2Error
from flask import render_template, request
from flask.typing import ResponseReturnValue
from flask_login import current_user, login_required
from sqlalchemy import select

from app.extensions import db
from app.models import Membership
from app.models.assistants import AssistantClient, AssistantDeviceCode, ClientKind
from app.models.base import as_utc, utcnow
from app.services.assistants import clients, grants
from app.services.assistants.server import authorization_server
from app.services.tenancy import active_memberships
from app.web.assistant_oauth import bp
from app.web.context import current_membership
from app.web.forms import EmptyForm


def _refused(message: str, status: int = 400) -> ResponseReturnValue:
    return render_template(
        "error.html", message=message, status=status, title="Assistant not connected"
    ), status


def _client_facts(client: AssistantClient) -> dict:
    """What the page says about the client, and which of it is unverified."""
    address = urlsplit(client.client_id).hostname if client.kind == ClientKind.METADATA_DOCUMENT else None
    home = urlsplit(client.client_uri).hostname if client.client_uri else None
    return {
        "name": client.client_name,
        # A metadata document was fetched from its client_id's host: the host is what we know; the name is its claim.
        "address": address,
        "home": home,
        "home_unverified": home is not None and home != address,
        "name_unverified": True,
        "registered": client.kind == ClientKind.REGISTERED,
        "logo_uri": client.logo_uri,
        "logo_data": client.logo_data,
        "redirect_hosts": sorted({urlsplit(u).hostname or u for u in client.redirect_uris or []}),
    }


def _chosen_membership(memberships: list[Membership]) -> Membership | None:
    """The company the form pins the assistant to: one of the person's active memberships, else None."""
    try:
        company_id = uuid.UUID(request.form.get("company_id", ""))
    except ValueError:
        return None
    return next((m for m in memberships if m.company_id == company_id), None)


def _page(template: str, client: AssistantClient, **extra: object) -> ResponseReturnValue:
    memberships = active_memberships(current_user)
    current = current_membership()
    return render_template(
        template,
        client=_client_facts(client),
        memberships=memberships,
        current=current,
        form=EmptyForm(formdata=None),
        **extra,
    )


@bp.route("/authorize", methods=["GET", "POST"])
@login_required
def authorize() -> ResponseReturnValue:
    server = authorization_server()
    try:
        client = clients.find_client(request.values.get("client_id", ""))
    except clients.ClientRefused as refused:
        return _refused(refused.message)
    if client is None:
        return _refused("This assistant is not known to Switchboard: its client_id is not registered.")
    try:
        grant = server.get_consent_grant(end_user=current_user)
    except OAuth2Error as error:
        if error.redirect_uri:
            return server.handle_error_response(None, error)
        return _refused(error.description or error.error)
    if request.method == "GET":
        return _page("assistants/consent.html", client, action=request.full_path)
    if request.form.get("decision") != "allow":
        return server.create_authorization_response(grant_user=None, grant=grant)
    membership = _chosen_membership(active_memberships(current_user))
    if membership is None:
        return _refused("Choose one of your companies for the assistant.", 403)
    consented = grants.consent(
        current_user, membership, client, read_only=request.form.get("read_only") == "on"
    )
    return server.create_authorization_response(grant_user=consented, grant=grant)


def _pending_device_code(user_code: str) -> AssistantDeviceCode | None:
    code = user_code.strip().upper()
    row = db.session.scalars(select(AssistantDeviceCode).filter_by(user_code=code)).one_or_none()
    if row is None or row.used_at or row.grant_id or row.denied_at or as_utc(row.expires_at) <= utcnow():
        return None
    return row


@bp.route("/device", methods=["GET", "POST"])
@login_required
def device() -> ResponseReturnValue:
    user_code = request.values.get("user_code", "")
    row = _pending_device_code(user_code) if user_code else None
    if row is None:
        message = "That code is not valid or has expired. Start the sign-in again." if user_code else None
        status = 400 if user_code else 200
        return render_template(
            "assistants/device_code.html", form=EmptyForm(formdata=None), message=message
        ), status
    try:
        client = clients.find_client(row.client_id)
    except clients.ClientRefused as refused:
        return _refused(refused.message)
    if client is None:
        return _refused("This assistant is not known to Switchboard.")
    if request.method == "GET" or "decision" not in request.form:
        return _page("assistants/consent.html", client, action=request.path, user_code=row.user_code)
    if request.form.get("decision") != "allow":
        row.denied_at = utcnow()
        return render_template("assistants/device_done.html", allowed=False, client=_client_facts(client))
    membership = _chosen_membership(active_memberships(current_user))
    if membership is None:
        return _refused("Choose one of your companies for the assistant.", 403)
    consented = grants.consent(
        current_user, membership, client, read_only=request.form.get("read_only") == "on"
    )
    row.grant_id = consented.id
    return render_template("assistants/device_done.html", allowed=True, client=_client_facts(client))
