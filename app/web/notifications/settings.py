"""Settings pages of notifications: my email setting, and the company's webhooks with their delivery attempts."""

from __future__ import annotations

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user

from app.core.errors import Unprocessable, ValidationFailed
from app.models import Membership
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
    form = EmailSettingsForm(formdata=None, email_enabled=notifications.email_enabled(current_user.id))
    return render_template("settings/notifications.html", form=form, saved=request.args.get("saved") == "1")


@bp.post("/settings/notifications")
def save_notification_settings() -> ResponseReturnValue:
    current_membership()
    form = EmailSettingsForm()
    if not form.validate_on_submit():
        return render_template("settings/notifications.html", form=form, saved=False), 422
    notifications.set_email_enabled(current_user, bool(form.email_enabled.data))
    return redirect(url_for("inbox.notification_settings", saved=1), code=303)


def _webhooks_page(
    membership: Membership, form: WebhookForm, *, new_secret: str | None = None, status: int = 200
) -> ResponseReturnValue:
    endpoints = webhooks.list_endpoints(membership.company_id)
    return render_template(
        "settings/webhooks.html",
        endpoints=[(e, webhooks.recent_deliveries(e)) for e in endpoints],
        form=form,
        button_form=EmptyForm(formdata=None),
        new_secret=new_secret,
    ), status


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


@bp.post("/settings/webhooks/<endpoint_id>/delete")
def delete_webhook(endpoint_id: str) -> ResponseReturnValue:
    membership = current_membership()
    _button_checked()
    webhooks.delete_endpoint(membership, webhooks.load_endpoint(membership, parse_uuid(endpoint_id)))
    return redirect(url_for("inbox.webhooks_page"), code=303)


@bp.post("/settings/webhooks/deliveries/<delivery_id>/send-again")
def send_again(delivery_id: str) -> ResponseReturnValue:
    membership = current_membership()
    _button_checked()
    webhooks.send_again(membership, parse_uuid(delivery_id))
    after_commit(notify_worker)
    return redirect(url_for("inbox.webhooks_page"), code=303)
