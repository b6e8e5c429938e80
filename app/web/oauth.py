"""OAuth door: start a provider sign-in for a connection (page form or JSON) and receive the provider's callback.

The callback is a GET (CSRF-exempt) but needs the same signed-in person who started the sign-in. It consumes the
state and commits that before exchanging the code, so a replayed or parallel callback can never exchange twice.
"""

from __future__ import annotations

import uuid

from flask import Blueprint, abort, current_app, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user, login_required
from pydantic import BaseModel, ConfigDict, Field

from app.catalog.loader import get_app
from app.catalog.schema import AppDefinition
from app.core.errors import Conflict, Forbidden, NotFound, ServiceError, Unprocessable
from app.extensions import db
from app.models import Membership, OAuthState, ThreadInteraction, ToolConnection
from app.services import cards
from app.services.intents import setup as intent_setup
from app.services.oauth import callback as oauth_callback
from app.services.oauth import errors as oauth_errors
from app.services.oauth import flow as oauth_flow
from app.services.oauth.errors import CARD_CLOSED
from app.services.tenancy import get_membership
from app.web import oauth_pages
from app.web.api.validation import parse_body
from app.web.context import load_scoped
from app.web.openapi import operations as openapi
from app.web.openapi.responses import respond
from app.web.security import csrf_exempt_endpoint
from app.web.unit_of_work import Reason, after_commit, commit_point
from app.workers.continuations import deliver as deliver_continuation

bp = Blueprint("oauth", __name__)
csrf_exempt_endpoint("oauth.callback")

INTENT_USER_MISMATCH = (
    "This sign-in answers a request addressed to someone else, so nothing was connected. "
    "Only the person the request asks can connect it."
)


class StartBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    interactionId: uuid.UUID | None = None


def _connection_and_app(connection_id: str) -> tuple[ToolConnection, Membership, AppDefinition]:
    connection, membership = load_scoped(ToolConnection, connection_id)
    if connection.status == "archived":
        abort(404)
    app_definition = get_app(connection.app_slug)
    if app_definition is None:
        abort(404)
    return connection, membership, app_definition


def _card_id(connection: ToolConnection, named: uuid.UUID | None) -> uuid.UUID | None:
    """The card a sign-in answers: the one the request names, else the card the person's draft is bound to."""
    return named or intent_setup.bound_card_id(connection, current_user.id)


def _start_authorization(
    membership: Membership,
    connection: ToolConnection,
    app_definition: AppDefinition,
    interaction_id: uuid.UUID | None,
) -> str:
    """The provider's sign-in URL. A card's sign-in keeps the requesting page's origin: the callback page posts
    the outcome to that origin only."""
    if interaction_id is not None:
        intent_setup.prepare_card_sign_in(membership, connection, interaction_id)
    return oauth_flow.start_authorization(
        membership,
        connection,
        app_definition,
        interaction_id=interaction_id,
        opener_origin=request.headers.get("Origin") if interaction_id else None,
    )


@bp.post("/apps/<connection_id>/oauth/start")
@login_required
def start(connection_id: str) -> ResponseReturnValue:
    """The setup flow's "Sign in with <provider>" button (also Reconnect): 303 to the provider, or a page that says
    why the sign-in could not start (no OAuth client, no authorization server, a closed card) with a way back."""
    connection, membership, app_definition = _connection_and_app(connection_id)
    interaction_id = _card_id(connection, _optional_uuid(request.form.get("interaction_id")))
    try:
        url = _start_authorization(membership, connection, app_definition, interaction_id)
    except ServiceError as err:
        db.session.rollback()
        interaction = db.session.get(ThreadInteraction, interaction_id) if interaction_id else None
        if err.message == CARD_CLOSED:
            return _card_closed_page_for(interaction)
        return oauth_pages.start_failed(err, connection, app_definition, interaction)
    return redirect(url, code=303)


class OAuthStartResponse(BaseModel):
    authorizationUrl: str = Field(
        description="Open in a popup (or navigate to it) to sign in with the provider."
    )


@bp.post("/api/tools/oauth/<connection_id>/start")
@login_required
@openapi.documented(
    "Start an OAuth sign-in for a connection (the task card opens the URL in a popup)",
    tag="connections",
    security=openapi.BOARD_WRITE,
    body=StartBody,
    responses={
        200: openapi.Answer("Where to sign in", (OAuthStartResponse,)),
        **{status: answer for status, answer in openapi.WRITE_ANSWERS.items() if status != 422},
        409: openapi.error(
            "The sign-in cannot start: the connection does not sign in with OAuth, no OAuth client is configured, "
            "the provider names no authorization server, or the card is closed"
        ),
    },
)
def start_json(connection_id: str) -> ResponseReturnValue:
    """JSON start for the task card: `{interactionId?}` -> `{authorizationUrl}` (opened in a popup)."""
    connection, membership, app_definition = _connection_and_app(connection_id)
    body = parse_body(StartBody)
    interaction_id = _card_id(connection, body.interactionId)
    try:
        url = _start_authorization(membership, connection, app_definition, interaction_id)
    except Unprocessable as err:
        # Each refusal is about state, never the body: the connection does not sign in with OAuth, the operator
        # configured no client, the provider names no authorization server.
        raise Conflict(err.message) from None
    return respond(OAuthStartResponse(authorizationUrl=url))


@bp.get("/oauth/callback")
@login_required
def callback() -> ResponseReturnValue:
    raw_state = request.args.get("state", "")
    state = oauth_flow.peek_state(raw_state)
    if state is None:
        return _unknown_state(raw_state)
    if state.user_id != current_user.id:
        return oauth_pages.failed(oauth_errors.WRONG_USER, 403)
    try:
        state = oauth_flow.consume_state(raw_state, current_user.id)
    except oauth_errors.InvalidOAuthState:
        db.session.rollback()
        return _invalid_state()
    commit_point(Reason.OAUTH_STATE_SPENT)
    # Kept as read now: resolving the card deletes its sign-in states, this one included.
    db.session.refresh(state)
    db.session.expunge(state)
    if not _callback_user_is_addressee(state):
        # A card's sign-in finishes only for the person the card asks (nothing is exchanged for anyone else).
        return oauth_pages.failed(INTENT_USER_MISMATCH, 403)
    if state.interaction_id and not intent_setup.card_is_open(state.interaction_id):
        return _card_closed_page(state)  # nothing is exchanged for a card that stopped waiting
    connection = db.session.get(ToolConnection, state.connection_id)
    membership = get_membership(state.company_id, current_user.id)
    app_definition = get_app(connection.app_slug) if connection is not None else None
    if connection is None or app_definition is None or membership is None or not membership.is_active_member:
        return _invalid_state()
    try:
        signed_in = oauth_callback.exchange_authorization(
            membership,
            state,
            connection,
            app_definition,
            code=request.args.get("code"),
            error=request.args.get("error"),
            iss=request.args.get("iss"),
        )
    except (oauth_errors.OAuthFlowError, Forbidden) as err:
        db.session.rollback()
        reason = getattr(err, "reason", "forbidden")
        oauth_callback.record_failure(current_user.id, state, reason)
        if state.interaction_id:
            intent_setup.mark_needs_retry(state.interaction_id, current_user.id, f"oauth_{reason}")
            return _opener_page(state, intent_setup.card_outcome(state.interaction_id), error=err.message)
        commit_point(Reason.OAUTH_FAILURE_RECORDED)
        return oauth_pages.failed(err.message, err.status, connection=connection, app=app_definition)
    except ServiceError as err:
        db.session.rollback()
        oauth_callback.record_failure(current_user.id, state, "provider_error")
        if state.interaction_id:
            intent_setup.mark_needs_retry(state.interaction_id, current_user.id, "oauth_provider_error")
            return _opener_page(state, intent_setup.card_outcome(state.interaction_id), error=err.message)
        commit_point(Reason.OAUTH_FAILURE_RECORDED)
        return oauth_pages.failed(err.message, err.status, connection=connection, app=app_definition)
    if not state.interaction_id:
        oauth_callback.store_authorization(membership, state, connection, signed_in)
        return redirect(url_for("apps.permissions", connection_id=connection.id, done="connected"), code=303)
    return _finish_card(membership, state, connection, signed_in)


def _finish_card(
    membership: Membership,
    state: OAuthState,
    connection: ToolConnection,
    signed_in: oauth_callback.SignedIn,
) -> ResponseReturnValue:
    """A card's sign-in: tokens, activation, audience and resolution commit together, or nothing does."""
    interaction_id = state.interaction_id
    if interaction_id is None:  # only a card's sign-in comes here
        raise NotFound("Unknown interaction")
    try:
        intent_setup.finish_card_oauth(membership, state, connection, signed_in)
    except intent_setup.CardClosed:
        db.session.rollback()
        return _card_closed_page(state)
    except (intent_setup.CardCompletionFailed, Forbidden) as err:
        db.session.rollback()
        oauth_callback.record_failure(current_user.id, state, "completion_refused")
        intent_setup.mark_needs_retry(interaction_id, current_user.id, "completion_refused")
        return _opener_page(state, intent_setup.card_outcome(interaction_id), error=err.message)
    after_commit(lambda: deliver_continuation(interaction_id))
    return _opener_page(state, intent_setup.card_outcome(interaction_id))


def _callback_user_is_addressee(state: OAuthState) -> bool:
    if not state.interaction_id:
        return True
    interaction = db.session.get(ThreadInteraction, state.interaction_id)
    return interaction is None or cards.is_addressee(interaction, current_user.id)


def _card_closed_page(state: OAuthState) -> ResponseReturnValue:
    return _card_closed_page_for(db.session.get(ThreadInteraction, state.interaction_id))


def _card_closed_page_for(interaction: ThreadInteraction | None) -> ResponseReturnValue:
    return (
        render_template(
            "oauth/card_closed.html",
            message=CARD_CLOSED,
            task_url=url_for("board.task", issue_id=interaction.issue_id) if interaction else None,
        ),
        409,
    )


def _optional_uuid(value: str | None) -> uuid.UUID | None:
    if not value:
        return None
    try:
        return uuid.UUID(str(value))
    except ValueError:
        raise NotFound("Unknown interaction") from None


def _unknown_state(raw_state: str) -> ResponseReturnValue:
    """A state that is gone: when it named a card of this person that stopped waiting, say that plainly."""
    card_id = oauth_flow.card_of_state(raw_state)
    interaction = db.session.get(ThreadInteraction, card_id) if card_id is not None else None
    if (
        interaction is not None
        and cards.is_addressee(interaction, current_user.id)
        and get_membership(interaction.company_id, current_user.id) is not None
    ):
        if interaction.status == "accepted":
            # A reload of the callback that connected this card: say so, not that nothing was connected.
            return _card_page(interaction, None, "connected")
        if not intent_setup.card_is_open(interaction.id):
            return _card_closed_page_for(interaction)
        return _invalid_state(interaction)
    return _invalid_state()


def _invalid_state(interaction: ThreadInteraction | None = None) -> ResponseReturnValue:
    """A state nobody can finish (used, expired or unknown); back to the card it named, when it is this person's."""
    return oauth_pages.failed(oauth_errors.INVALID_STATE, 400, interaction=interaction)


def _opener_page(state: OAuthState, outcome: str, error: str | None = None) -> ResponseReturnValue:
    interaction = db.session.get(ThreadInteraction, state.interaction_id)
    return _card_page(interaction, state, outcome, error, interaction_id=state.interaction_id)


def _card_page(
    interaction: ThreadInteraction | None,
    state: OAuthState | None,
    outcome: str,
    error: str | None = None,
    *,
    interaction_id: uuid.UUID | None = None,
) -> ResponseReturnValue:
    """The end of a card's sign-in in its window: the outcome posted to the opener (the origin the sign-in started
    from, else our own), or back to the task."""
    fallback = (
        url_for("board.task", issue_id=interaction.issue_id) if interaction else url_for("apps.catalog")
    )
    card_id = interaction_id or (interaction.id if interaction is not None else None)
    return render_template(
        "oauth/opener.html",
        message={
            "type": "paperclip.connection-intent.oauth",
            "interactionId": str(card_id),
            "outcome": outcome,
        },
        target_origin=(state.opener_origin if state is not None else None)
        or oauth_flow.normalize_origin(current_app.config["PUBLIC_BASE_URL"])
        or "/",
        fallback_url=fallback,
        error=error,
    )
