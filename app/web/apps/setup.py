"""The full-page host of the shared setup flow: connect an app, and reconnect (rotate the key of) a connection.

Connect starts a draft, commits it, then verifies the credentials with the provider. A refusal keeps the draft (its
id travels in a hidden field) so the next submit finishes that same draft instead of starting another.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from flask import abort, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user

from app.catalog.loader import get_app, get_method
from app.catalog.schema import AppDefinition
from app.core.errors import Forbidden, ProviderRefused
from app.extensions import db, htmx
from app.models import Membership, ThreadInteraction, ToolConnection
from app.services.access.effective import CONFIGURE_FORBIDDEN, can_configure
from app.services.connections.audience import Audience
from app.services.connections.settings import UNSET, Unset
from app.services.intents import setup as intent_setup
from app.services.oauth import flow as oauth_flow
from app.web.apps import bp
from app.web.apps.setup_flow import (
    SETUP_REFUSALS,
    SetupFlow,
    build_setup_flow,
    finish_step,
    read_submission,
    refusal_view,
    start_or_resume_draft,
)
from app.web.context import current_membership, load_scoped, require_write
from app.web.unit_of_work import Reason, after_commit, commit_point
from app.workers.continuations import deliver as deliver_continuation


def app_or_404(slug: str) -> AppDefinition:
    app_definition = get_app(slug)
    if app_definition is None:
        abort(404)
    return app_definition


def resumable_draft(
    draft_id: str | None, membership: Membership, app_definition: AppDefinition
) -> ToolConnection | None:
    """The kept draft named by the form, only if it is this company's, this app's, still a draft, and the person's
    to configure; anything else is ignored (and a fresh draft is started) rather than touched."""
    if not draft_id:
        return None
    try:
        draft = db.session.get(ToolConnection, uuid.UUID(draft_id))
    except ValueError:
        return None
    if (
        draft is None
        or draft.company_id != membership.company_id
        or draft.status != "draft"
        or draft.app_slug != app_definition.slug
        or not can_configure(membership, draft)
    ):
        return None
    return draft


def _flow_response(flow: SetupFlow, status: int = 200) -> ResponseReturnValue:
    """The partial alone for an htmx request aimed at the flow (method switch, hosted dialog), else the page."""
    if htmx and not htmx.boosted and htmx.target == "setup-flow":
        return render_template("apps/_setup_flow.html", flow=flow), status
    return render_template("apps/connect.html", flow=flow), status


def _connect_flow(membership: Membership, app_definition: AppDefinition, **kwargs: Any) -> SetupFlow:
    return build_setup_flow(
        membership,
        app_definition,
        action_url=url_for("apps.connect", slug=app_definition.slug),
        method_url=url_for("apps.connect", slug=app_definition.slug),
        **kwargs,
    )


@bp.get("/apps/<slug>/connect")
def connect(slug: str) -> ResponseReturnValue:
    membership = current_membership()
    app_definition = app_or_404(slug)
    method_key = request.args.get("method_key")
    # Switching the method of a kept setup (after a failed attempt) keeps that setup.
    draft = resumable_draft(request.args.get("draft_id"), membership, app_definition)
    return _flow_response(_connect_flow(membership, app_definition, method_key=method_key, draft=draft))


@bp.post("/apps/<slug>/connect")
def connect_submit(slug: str) -> ResponseReturnValue:
    membership = current_membership()
    app_definition = app_or_404(slug)
    require_write(membership)
    draft = resumable_draft(request.form.get("draft_id"), membership, app_definition)
    # A kept draft takes the method chosen in the form (it may change after a failed attempt), else its own.
    method = get_method(
        app_definition, request.form.get("method_key") or (draft.method_key if draft else None)
    )
    submission = read_submission(request.form, method)

    def failed(status: int, **kwargs: Any) -> ResponseReturnValue:
        db.session.rollback()
        kept = draft if draft is not None and draft.status == "draft" else None
        flow = _connect_flow(
            membership, app_definition, method_key=method.key, submission=submission, draft=kept, **kwargs
        )
        return _flow_response(flow, status)

    try:
        step = start_or_resume_draft(membership, app_definition, method, submission, draft)
        draft = step.connection
        if step.needs_sign_in:
            return _sign_in(membership, draft, app_definition, step.method_config, step.audience)
        card = finish_step(membership, app_definition, step, submission)
    except SETUP_REFUSALS as err:
        status, shown = refusal_view(err)
        response = failed(status, **shown)
        record_refusal(membership, draft, err)
        return response
    except intent_setup.CardCompletionFailed as err:
        return _card_refused(err, failed)
    return _finished(draft, card)


def record_refusal(
    membership: Membership,
    connection: ToolConnection | None,
    err: Exception,
    interaction_id: uuid.UUID | None = None,
) -> None:
    """A key the provider refused is a failed attempt: recorded as one (the form answers 422 and rolls back), and
    the card it answers asks to try again. The card's dialog records its refusals here too."""
    if connection is None or not isinstance(err, ProviderRefused):
        return
    db.session.rollback()
    intent_setup.setup_refused(membership, connection, err, interaction_id)
    commit_point(Reason.SETUP_FAILURE_RECORDED)


def _card_refused(
    err: intent_setup.CardCompletionFailed, failed: Callable[..., ResponseReturnValue]
) -> ResponseReturnValue:
    """The draft finishes a card whose completion was refused: nothing is kept, the card asks to try again."""
    db.session.rollback()
    intent_setup.mark_needs_retry(err.interaction_id, current_user.id, "completion_refused")
    commit_point(Reason.CARD_NEEDS_RETRY)
    return failed(409, form_errors=[err.message])


def _finished(connection: ToolConnection, card: ThreadInteraction | None) -> ResponseReturnValue:
    """A card this setup resolved wakes its agent once the request commits; the person lands on the permissions page."""
    if card is not None:
        after_commit(lambda: deliver_continuation(card.id))
    return redirect(url_for("apps.permissions", connection_id=connection.id, done="connected"), code=303)


def _sign_in(
    membership: Membership,
    connection: ToolConnection,
    app_definition: AppDefinition,
    method_config: dict | None | Unset,
    audience: Audience | Unset,
) -> ResponseReturnValue:
    """OAuth methods: save the draft's public values and audience (this grants nothing; a card's draft keeps its
    audience on the card), then 303 to the provider. A card's draft signs in for its card."""
    card = intent_setup.save_setup_choices(
        membership, connection, app_definition, method_config=method_config, audience=audience
    )
    url = oauth_flow.start_authorization(
        membership, connection, app_definition, interaction_id=card.id if card is not None else None
    )
    return redirect(url, code=303)


def _reconnect_flow(
    membership: Membership, connection: ToolConnection, app_definition: AppDefinition, **kwargs: Any
) -> SetupFlow:
    return build_setup_flow(
        membership,
        app_definition,
        action_url=url_for("apps.reconnect", connection_id=connection.id),
        mode="reconnect",
        connection=connection,
        **kwargs,
    )


@bp.route("/apps/<connection_id>/reconnect", methods=["GET", "POST"])
def reconnect(connection_id: str) -> ResponseReturnValue:
    connection, membership = load_scoped(ToolConnection, connection_id)
    if connection.status == "archived":
        abort(404)
    app_definition = app_or_404(connection.app_slug)
    if not can_configure(membership, connection):
        raise Forbidden(CONFIGURE_FORBIDDEN)
    if request.method == "GET":
        return _flow_response(_reconnect_flow(membership, connection, app_definition))
    method = get_method(app_definition, connection.method_key)
    submission = read_submission(request.form, method, reconnect=True)

    def failed(status: int, **kwargs: Any) -> ResponseReturnValue:
        db.session.rollback()
        return _flow_response(_reconnect_flow(membership, connection, app_definition, **kwargs), status)

    try:
        if method.auth == "oauth":
            return _sign_in(membership, connection, app_definition, UNSET, UNSET)
        card = intent_setup.finish_setup(
            membership, connection, app_definition, credentials=submission.credentials
        )
    except SETUP_REFUSALS as err:
        status, shown = refusal_view(err)
        response = failed(status, **shown)
        record_refusal(membership, connection, err)
        return response
    except intent_setup.CardCompletionFailed as err:
        return _card_refused(err, failed)
    return _finished(connection, card)
