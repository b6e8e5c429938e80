"""Settings pages of notifications: my email setting, and the company's webhooks with their delivery attempts."""

from __future__ import annotations

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user

from app.core.errors import Unprocessable, ValidationFailed
from app.models import Membership, WebhookEndpoint
from app.services import notifications
from app.services.notifications import webhooks
from app.web.context import current_membership, parse_uuid
from app.web.forms import EmptyForm
from app.web.notifications import bp
from app.web.notifications.forms import EmailSettingsForm, WebhookForm
from app.web.unit_of_work import after_commit
from app.workers.loop import notify_worker


@bp.get("/settings/notifications")
def notification_settings() -> ResponseReturnValue:
    current_membership()
    status = notifications.email_status(current_user.id)
    form = EmailSettingsForm(formdata=None, email_enabled=status.enabled)
    return render_template(
        "settings/notifications.html", form=form, email=status, saved=request.args.get("saved") == "1"
    )


@bp.post("/settings/notifications")
def save_notification_settings() -> ResponseReturnValue:
    current_membership()
    form = EmailSettingsForm()
    if not form.validate_on_submit():
        status = notifications.email_status(current_user.id)
        return render_template("settings/notifications.html", form=form, email=status, saved=False), 422
    notifications.set_email_enabled(current_user, bool(form.email_enabled.data))
    return redirect(url_for("inbox.notification_settings", saved=1), code=303)


# What the page says after a change (chosen by a fixed key, so nothing typed is ever echoed).
NOTICES = {
    "saved": "The webhook is saved.",
    "disabled": "The webhook is disabled. Nothing is sent to it until it is enabled again.",
    "enabled": "The webhook is enabled again. New events are sent to it.",
    "deleted": "The webhook is deleted, with its delivery history.",
    "test": "A test event is queued. Its attempt shows in the webhook’s deliveries in a few seconds.",
}


def _webhooks_page(
    membership: Membership,
    form: WebhookForm,
    *,
    new_secret: str | None = None,
    rotated: WebhookEndpoint | None = None,
    status: int = 200,
) -> ResponseReturnValue:
    endpoints = webhooks.list_endpoints(membership.company_id)
    return render_template(
        "settings/webhooks.html",
        endpoints=[(e, webhooks.recent_deliveries(e)) for e in endpoints],
        form=form,
        button_form=EmptyForm(formdata=None),
        new_secret=new_secret,
        rotated=rotated,
        notice=NOTICES.get(request.args.get("done", "")),
        attempt_sentence=webhooks.attempt_sentence,
    ), status


def _endpoint(membership: Membership, endpoint_id: str) -> WebhookEndpoint:
    """Load -> same company (404) -> connection-management authority (403)."""
    return webhooks.load_endpoint(membership, parse_uuid(endpoint_id))


def _edit_page(endpoint: WebhookEndpoint, form: WebhookForm, status: int = 200) -> ResponseReturnValue:
    return render_template("settings/webhook_edit.html", endpoint=endpoint, form=form), status


@bp.get("/settings/webhooks")
def webhooks_page() -> ResponseReturnValue:
    membership = current_membership()
    webhooks.require_manager(membership)
    return _webhooks_page(membership, WebhookForm(formdata=None))


@bp.post("/settings/webhooks")
def create_webhook() -> ResponseReturnValue:
    membership = current_membership()
    webhooks.require_manager(membership)
    form = WebhookForm()
    if not form.validate_on_submit():
        return _webhooks_page(membership, form, status=422)
    try:
        _endpoint, secret = webhooks.create_endpoint(membership, form.url.data, form.events.data)
    except ValidationFailed as err:
        for detail in err.details:
            getattr(form, detail["loc"][0]).errors.append(detail["msg"])
        return _webhooks_page(membership, form, status=422)
    return _webhooks_page(membership, WebhookForm(formdata=None), new_secret=secret, status=201)


def _button_checked() -> None:
    if not EmptyForm().validate_on_submit():
        raise Unprocessable("The form is missing its security token")


@bp.get("/settings/webhooks/<endpoint_id>/delete")
def delete_webhook_confirm(endpoint_id: str) -> ResponseReturnValue:
    """Deleting wipes the delivery history: the same confirmation page as a connection's, saying what goes."""
    endpoint = _endpoint(current_membership(), endpoint_id)
    return render_template(
        "settings/webhook_delete.html",
        webhook=endpoint,  # not `endpoint`: the layout reads Flask's request endpoint under that name
        deliveries=webhooks.delivery_count(endpoint),
        button_form=EmptyForm(formdata=None),
    )


@bp.post("/settings/webhooks/<endpoint_id>/test")
def send_test_event(endpoint_id: str) -> ResponseReturnValue:
    membership = current_membership()
    _button_checked()
    endpoint = _endpoint(membership, endpoint_id)
    webhooks.send_test_event(membership, endpoint)
    after_commit(notify_worker)
    return redirect(url_for("inbox.webhooks_page", done="test") + f"#webhook-{endpoint.id}", code=303)


@bp.post("/settings/webhooks/<endpoint_id>/delete")
def delete_webhook(endpoint_id: str) -> ResponseReturnValue:
    membership = current_membership()
    _button_checked()
    webhooks.delete_endpoint(membership, _endpoint(membership, endpoint_id))
    return redirect(url_for("inbox.webhooks_page", done="deleted"), code=303)


@bp.get("/settings/webhooks/<endpoint_id>/edit")
def edit_webhook(endpoint_id: str) -> ResponseReturnValue:
    endpoint = _endpoint(current_membership(), endpoint_id)
    return _edit_page(endpoint, WebhookForm(formdata=None, url=endpoint.url, events=list(endpoint.events)))


@bp.post("/settings/webhooks/<endpoint_id>/edit")
def save_webhook(endpoint_id: str) -> ResponseReturnValue:
    membership = current_membership()
    endpoint = _endpoint(membership, endpoint_id)
    form = WebhookForm()
    if not form.validate_on_submit():
        return _edit_page(endpoint, form, 422)
    try:
        webhooks.update_endpoint(membership, endpoint, form.url.data, form.events.data)
    except ValidationFailed as err:
        for detail in err.details:
            getattr(form, detail["loc"][0]).errors.append(detail["msg"])
        return _edit_page(endpoint, form, 422)
    return redirect(url_for("inbox.webhooks_page", done="saved") + f"#webhook-{endpoint.id}", code=303)


def _switch(endpoint_id: str, enabled: bool) -> ResponseReturnValue:
    membership = current_membership()
    _button_checked()
    endpoint = webhooks.set_enabled(membership, _endpoint(membership, endpoint_id), enabled)
    done = "enabled" if enabled else "disabled"
    return redirect(url_for("inbox.webhooks_page", done=done) + f"#webhook-{endpoint.id}", code=303)


@bp.post("/settings/webhooks/<endpoint_id>/disable")
def disable_webhook(endpoint_id: str) -> ResponseReturnValue:
    return _switch(endpoint_id, False)


@bp.post("/settings/webhooks/<endpoint_id>/enable")
def enable_webhook(endpoint_id: str) -> ResponseReturnValue:
    return _switch(endpoint_id, True)


@bp.post("/settings/webhooks/<endpoint_id>/rotate")
def rotate_webhook_secret(endpoint_id: str) -> ResponseReturnValue:
    """A new signing secret, shown on this answer only (never stored in clear, never redirected with)."""
    membership = current_membership()
    _button_checked()
    endpoint = _endpoint(membership, endpoint_id)
    secret = webhooks.rotate_secret(membership, endpoint)
    return _webhooks_page(membership, WebhookForm(formdata=None), new_secret=secret, rotated=endpoint)


@bp.post("/settings/webhooks/deliveries/<delivery_id>/send-again")
def send_again(delivery_id: str) -> ResponseReturnValue:
    membership = current_membership()
    _button_checked()
    webhooks.send_again(membership, parse_uuid(delivery_id))
    after_commit(notify_worker)
    return redirect(url_for("inbox.webhooks_page"), code=303)
