"""The connection card in a task thread: its htmx endpoints and the dialog that hosts the shared setup flow.

Every view is thin: load the card (404 unless it is a connection intent of a company the person belongs to),
authorize (only the addressed person acts: 403 otherwise, and setup options are never loaded for anyone else), then
call the intent and connection services, which own every rule, and commit once. Continuation delivery runs after
the commit, exactly as the board JSON API does.

Fragments come from `templates/interactions/_connection_intent.html` (the card, whose words `connection_view`
presents from the state `services/intents/card_state` decides) and `templates/intents/` (the dialog body); without htmx the same URLs answer with full pages or 303 redirects back to the task, so the card works
without JavaScript. The card never renders credentials or authorization URLs: OAuth starts with a form POST whose
answer is the redirect to the provider.
"""

from __future__ import annotations

from typing import Any

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from flask_login import current_user

from app.catalog.loader import get_method
from app.core.errors import Conflict, NotFound, ServiceError
from app.extensions import db, htmx
from app.models import Membership, ThreadInteraction, ToolConnection
from app.services import cards
from app.services.connections.settings import UNSET, update_connection
from app.services.intents import access_requests
from app.services.intents import card as intents_card
from app.services.intents import card_state as intents_card_state
from app.services.intents import resolution as intents_resolution
from app.services.intents import setup as intent_setup
from app.services.oauth import flow as oauth_flow
from app.web.apps.setup import record_refusal, resumable_draft
from app.web.apps.setup_flow import (
    SETUP_REFUSALS,
    SetupFlow,
    finish_step,
    read_submission,
    refusal_view,
    start_or_resume_draft,
)
from app.web.blueprints import signed_in_blueprint, tells_the_inbox_of_answers
from app.web.cards.connection_dialog import (
    catalog_app,
    dialog_context,
    dialog_flow,
    is_fragment,
    reconnect_flow,
)
from app.web.cards.connection_view import CardView, card_view
from app.web.context import membership_for, parse_uuid, require_write
from app.web.unit_of_work import Reason, after_commit, commit_point
from app.workers.continuations import deliver as deliver_continuation

bp = tells_the_inbox_of_answers(signed_in_blueprint("intent_cards", __name__, varies_on_htmx=True))

RETRY_NOTE = "Authorization did not finish, so nothing was connected. You can try again."
SAVE_AND_EXIT = "save"


@bp.app_template_global("connection_card")
def _connection_card(item: ThreadInteraction) -> CardView:
    return card_view(item)


# --- loading and answering --------------------------------------------------------------------------------------


def _load(interaction_id: str) -> tuple[ThreadInteraction, Membership]:
    """Load -> company membership (404) ; the caller decides whether only the addressee may go on."""
    interaction = intents_card.get_connection_card(parse_uuid(interaction_id))
    return interaction, membership_for(interaction.company_id)


def _addressed(interaction_id: str) -> tuple[ThreadInteraction, Membership]:
    interaction, membership = _load(interaction_id)
    cards.assert_may_answer(interaction, current_user.id)
    return interaction, membership


def _task_url(interaction: ThreadInteraction) -> str:
    return url_for("board.task", issue_id=interaction.issue_id) + f"#intent-card-{interaction.id}"


def _card_response(
    interaction: ThreadInteraction, status: int = 200, error: str | None = None
) -> ResponseReturnValue:
    """The card alone for htmx (swapped over the card, wherever the request came from), else back to the task."""
    if not is_fragment():
        return redirect(_task_url(interaction), code=303)
    db.session.refresh(interaction)
    html = render_template("interactions/_connection_intent.html", item=interaction, card_error=error)
    return html, status, {"HX-Retarget": f"#intent-card-{interaction.id}", "HX-Reswap": "outerHTML"}


def _dialog_response(
    interaction: ThreadInteraction, membership: Membership, status: int = 200, **kwargs: Any
) -> ResponseReturnValue:
    context = dialog_context(interaction, membership, **kwargs)
    if is_fragment():
        headers = {
            "HX-Retarget": f"#intent-dialog-{interaction.id}-body",
            "HX-Reswap": "innerHTML",
        }
        return render_template("intents/_dialog_body.html", **context), status, headers
    return render_template("intents/dialog_page.html", **context), status


def _flow_response(
    interaction: ThreadInteraction, membership: Membership, flow: SetupFlow, status: int
) -> ResponseReturnValue:
    if is_fragment():
        return render_template("apps/_setup_flow.html", flow=flow), status
    context = dialog_context(interaction, membership, flow=flow)
    return render_template("intents/dialog_page.html", **context), status


def _resolved(interaction: ThreadInteraction) -> ResponseReturnValue:
    """Show the resolved card; once the request commits, deliver the continuation (errors are retried by the worker)."""
    after_commit(lambda: deliver_continuation(interaction.id))
    return _card_response(interaction)


# --- routes -----------------------------------------------------------------------------------------------------


@bp.get("/intents/<interaction_id>/card")
def card(interaction_id: str) -> ResponseReturnValue:
    """The card re-read from the server (after an OAuth hint, or to refresh): any member of the company."""
    interaction, _ = _load(interaction_id)
    if not is_fragment():
        return redirect(_task_url(interaction), code=303)
    return render_template("interactions/_connection_intent.html", item=interaction)


@bp.get("/intents/<interaction_id>/dialog")
def dialog(interaction_id: str) -> ResponseReturnValue:
    """The dialog body (addressee only): eligible connections to reuse and the shared setup flow."""
    interaction, membership = _addressed(interaction_id)
    if interaction.status != "pending":
        return _card_response(interaction)
    app_definition = catalog_app(interaction)
    method_key = request.args.get("method_key")
    if is_fragment() and htmx.target == "setup-flow" and app_definition is not None:
        # The flow's method switch: the partial alone.
        flow = dialog_flow(interaction, membership, app_definition, method_key=method_key)
        return render_template("apps/_setup_flow.html", flow=flow)
    return _dialog_response(interaction, membership, method_key=method_key)


@bp.post("/intents/<interaction_id>/decline")
def decline(interaction_id: str) -> ResponseReturnValue:
    """The "Not now" button: declines once; a repeat (or a card resolved meanwhile) answers the card as it is."""
    interaction, _ = _addressed(interaction_id)
    if interaction.status != "pending":
        return _card_response(interaction)
    resolved = intents_resolution.decline_intent(interaction.id, current_user.id, request.form.get("reason"))
    return _resolved(resolved)


@bp.post("/intents/<interaction_id>/use/<connection_id>")
def use_connection(interaction_id: str, connection_id: str) -> ResponseReturnValue:
    """The "Use <name>" button: complete the card with an existing eligible connection; a failure keeps the dialog open."""
    interaction, membership = _addressed(interaction_id)
    try:
        resolved = intents_resolution.complete_intent(
            interaction.id, current_user.id, parse_uuid(connection_id)
        )
    except ServiceError as err:
        db.session.rollback()
        if interaction.status != "pending":
            return _card_response(interaction)
        if access_requests.ACCESS_REQUEST_KEY in intents_card.intent_payload(interaction):
            # An access card has no dialog: the reason shows on the card itself.
            return _card_response(interaction, 422, error=err.message)
        return _dialog_response(interaction, membership, 422, error=err.message)
    return _resolved(resolved)


@bp.post("/intents/<interaction_id>/phase")
def phase(interaction_id: str) -> ResponseReturnValue:
    """A server-authored phase change (e.g. a closed sign-in window: `needs_retry`); answers the card."""
    interaction, _ = _addressed(interaction_id)
    if interaction.status != "pending":
        return _card_response(interaction)
    phase_asked = request.form.get("phase", "")
    # The page posts needs_retry only when the sign-in window closed before the provider answered.
    failure = intents_card_state.WINDOW_CLOSED if phase_asked == "needs_retry" else None
    intents_resolution.set_phase(interaction.id, current_user.id, phase_asked, failure=failure)
    return _card_response(interaction)


@bp.post("/intents/<interaction_id>/setup")
def setup_submit(interaction_id: str) -> ResponseReturnValue:
    """The dialog host of the shared setup flow: the same services as `/apps/<slug>/connect`, then completion.

    The chosen audience is saved on the card (bound to the draft; granting nothing) and the requesting agent must
    stay in it. **Save & exit** stops there. An API-key method is verified and finishes the card in one transaction
    with that audience; an OAuth method moves the card to `authorizing` and offers the provider sign-in, whose
    callback finishes the card. A refused completion keeps nothing and moves the card to `needs_retry`.
    """
    interaction, membership = _addressed(interaction_id)
    require_write(membership)
    if interaction.status != "pending":
        return _card_response(interaction)
    app_definition = catalog_app(interaction)
    if app_definition is None:
        raise NotFound("This service has no setup flow; use an existing connection")
    draft = resumable_draft(request.form.get("draft_id"), membership, app_definition)
    # A kept draft takes the method chosen in the form (it may change after a failed attempt), else its own.
    method = get_method(
        app_definition, request.form.get("method_key") or (draft.method_key if draft else None)
    )
    submission = read_submission(request.form, method)
    saving = request.form.get("intent") == SAVE_AND_EXIT

    def failed(status: int, **kwargs: Any) -> ResponseReturnValue:
        db.session.rollback()
        kept = draft if draft is not None and draft.status == "draft" else None
        flow = dialog_flow(
            interaction,
            membership,
            app_definition,
            method_key=method.key,
            submission=submission,
            draft=kept,
            **kwargs,
        )
        return _flow_response(interaction, membership, flow, status)

    requester = intents_resolution.requester_of(interaction)
    if not saving and not submission.audience.all_agents and requester not in submission.audience.agent_ids:
        name = card_view(interaction).agent_name
        return failed(422, errors={"agentIds": f"Keep {name} selected: it asked for this connection."})
    try:
        step = start_or_resume_draft(
            membership,
            app_definition,
            method,
            submission,
            draft,
            draft_audience=intent_setup.NO_AUDIENCE,
            check_before_draft=not saving,
        )
        draft = step.connection
        intent_setup.save_card_audience(
            interaction.id, membership, draft, submission.audience, require_requester=not saving
        )
        if step.method_config is not UNSET:
            update_connection(membership, draft, app_definition, method_config=step.method_config)
        # The saved setup outlives a refused key or a refused completion: Continue setup and Try again restore it.
        commit_point(Reason.DRAFT_BEFORE_VERIFY)
        if saving:
            return _card_response(interaction)
        if step.needs_sign_in:
            return _begin_oauth(interaction, membership, draft)
        resolved = finish_step(membership, app_definition, step, submission, card_id=interaction.id)
    except SETUP_REFUSALS as err:
        status, shown = refusal_view(err)
        # Inside the card's dialog a refusal re-renders the form (htmx swaps only 2xx/422), never a 403 page.
        response = failed(422 if status == 403 and is_fragment() else status, **shown)
        # A refused key is a failed attempt, recorded as on the Apps page (`tool_app.setup_failed`).
        record_refusal(membership, draft, err, interaction.id)
        return response
    except intent_setup.CardCompletionFailed as err:
        db.session.rollback()
        intent_setup.mark_needs_retry(interaction.id, current_user.id, "completion_refused")
        commit_point(Reason.CARD_NEEDS_RETRY)
        return _dialog_response(interaction, membership, 422, error=err.message)
    except Conflict:
        # The card stopped waiting meanwhile (task closed or reassigned): show what it became.
        db.session.rollback()
        return _card_response(interaction)
    if resolved is None:  # the draft is bound to this card (above), so finishing it resolves the card
        return _card_response(interaction)
    return _resolved(resolved)


@bp.post("/intents/<interaction_id>/reconnect/<connection_id>")
def reconnect(interaction_id: str, connection_id: str) -> ResponseReturnValue:
    """Reconnect the service's Disconnected connection (or one that needs a new sign-in) from the card (same id,
    settings and audience), then complete the card with it, in one unit of work; an OAuth one signs in for the card
    and its callback completes it. A refused key is logged as a failed setup and re-renders the
    form; a refused completion keeps nothing (the connection stays Disconnected) and shows why."""
    interaction, membership = _addressed(interaction_id)
    require_write(membership)
    if interaction.status != "pending":
        return _card_response(interaction)
    app_definition = catalog_app(interaction)
    connection = intent_setup.reconnectable_connection(interaction, membership, app_definition)
    if app_definition is None or connection is None or str(connection.id) != connection_id:
        raise NotFound("This connection cannot be reconnected from this card")
    method = get_method(app_definition, connection.method_key)
    submission = read_submission(request.form, method, reconnect=True)
    try:
        if method.auth == "oauth":
            # The sign-in is bound to the card: its callback reconnects the connection and completes the card.
            return _begin_oauth(interaction, membership, connection)
        intent_setup.finish_setup(membership, connection, app_definition, credentials=submission.credentials)
        resolved = intents_resolution.complete_intent(interaction.id, current_user.id, connection.id)
    except SETUP_REFUSALS as err:
        status, shown = refusal_view(err)
        db.session.rollback()
        flow = reconnect_flow(interaction, membership, app_definition, connection, **shown)
        response = _flow_response(
            interaction, membership, flow, 422 if status == 403 and is_fragment() else status
        )
        record_refusal(membership, connection, err, interaction.id)
        return response
    except Conflict:
        db.session.rollback()
        return _card_response(interaction)
    except ServiceError as err:
        db.session.rollback()
        return _dialog_response(interaction, membership, 422, error=err.message)
    return _resolved(resolved)


def _begin_oauth(
    interaction: ThreadInteraction, membership: Membership, connection: ToolConnection
) -> ResponseReturnValue:
    """Mark the card `authorizing` and sign in for it (the audience of a draft is saved on the card already).

    In the dialog the answer is the sign-in step, which intent_card.js posts into the window it opened on the same
    click; without JavaScript this page goes to the provider at once. Either way one click starts the sign-in.
    """
    app_definition = catalog_app(interaction)
    if app_definition is None:  # only a catalog app's setup or reconnect reaches a sign-in
        raise NotFound("This card's service has no sign-in")
    # No OAuth client or no authorization server: refused here, in the form, before any window opens.
    oauth_flow.check_startable(connection, app_definition)
    intents_resolution.set_phase(interaction.id, current_user.id, "authorizing")
    if not is_fragment():
        url = oauth_flow.start_authorization(
            membership, connection, app_definition, interaction_id=interaction.id
        )
        return redirect(url, code=303)
    return _dialog_response(interaction, membership, oauth_draft=connection)
