"""The connection card's presenter: words, labels and logos for the state `services/intents/card_state` decides.

The state machine runs in the service; this module only says it, for the card partial
(`templates/interactions/_connection_intent.html`, through the `connection_card` template global of
`app/web/cards/connection.py`) and the dialog.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from flask_login import current_user

from app.catalog.loader import get_app, logo_url
from app.models import ThreadInteraction, User
from app.models.base import as_utc
from app.services import cards
from app.services.intents.access_requests import ToolStanding, tools_as_they_stand
from app.services.intents.card import intent_payload
from app.services.intents.card_state import CardState, Continuation, card_state

PRIMARY_LABELS = {"requested": "Connect", "authorizing": "Continue setup", "needs_retry": "Try again"}
CONTINUE_LABEL = "Continue setup"
# The header under "<Agent> needs <Service>", in plain words. Upstream says "Access is added only
# for this agent.", which is true of a reused connection only: a new one is shared with the audience chosen in the
# dialog (all agents by default for those who may share, the requesting agent alone otherwise), so it says both.
INTRO = (
    "Connect your own {service} account, or let {agent} use a {service} connection that is already set up. "
    "An existing connection is added for {agent} only; a new one is shared with the agents you choose."
)


# What a card that asks to try again says, by why the last attempt failed (card_state.FAILURES); each says what
# happened and what to do, and never "Setup saved" (nothing was connected).
GENERIC_RETRY = "Authorization did not finish, so nothing was connected. You can try again."
RETRY_TEXTS = {
    "oauth_access_denied": "Sign-in to {service} was cancelled, so nothing was connected. Try again or choose another method.",
    "window_closed": (
        "The sign-in window was closed before {service} answered, so nothing was connected. Try again or choose "
        "another method."
    ),
    "oauth_unreachable": "Switchboard could not reach {service} to finish the sign-in. Try again in a moment.",
    "oauth_tools_failed": "Signed in to {service}, but its tools could not be listed, so nothing was connected. Try again.",
    "key_rejected": "{service} refused the key, so nothing was connected. Try again with another key or choose another method.",
    "key_unreachable": "Switchboard could not reach {service} to check the key. Try again in a moment.",
    "key_refused": "{service} refused the connection, so nothing was connected. Try again or choose another method.",
    "completion_refused": "The connection could not be given to this request, so nothing was connected. Try again.",
}
SIGN_IN_FAILED = "Sign-in to {service} failed, so nothing was connected. Try again or choose another method."


def retry_text(failure: str | None, service_name: str) -> str:
    if failure is None:
        return GENERIC_RETRY
    if failure in RETRY_TEXTS:
        return RETRY_TEXTS[failure].format(service=service_name)
    return SIGN_IN_FAILED.format(service=service_name)  # any other way a sign-in failed at the provider


@dataclass(frozen=True)
class CardView:
    """Everything the card partial renders, derived from the interaction and the viewer (no secrets, no URLs)."""

    id: str
    state: str  # requested | authorizing | needs_retry | accepted | declined | superseded | expired
    pending: bool
    is_addressee: bool
    service_name: str
    agent_name: str
    addressee_name: str
    logo: str | None
    dark_logo: str | None
    primary_label: str | None
    outcome_text: str | None
    # The addressee saved a setup for this card (Save & exit): the card offers to continue it.
    setup_saved: bool = False
    # An access request: {connectionId, connectionName, tools: [{toolName, permission}]} (no setup, a grant).
    access_request: dict | None = None
    # A pending access card's tools as they stand now (current policy; removed, blocked or changed ones say so).
    access_tools: tuple[ToolStanding, ...] = ()
    title: str | None = None
    # Who answered and when ("Connected by Dana Owner", the time), and what became of the agent's continuation.
    resolved_by: str | None = None
    resolved_at: datetime | None = None
    continuation_text: str | None = None
    can_decline: bool = False
    intro: str = ""
    # A card that asks to try again: what happened and what to do.
    retry_text: str | None = None
    # When the agent asked (the card's creation), said on the card with why: to go on with this task.
    asked_at: datetime | None = None
    # The answer waits for the task to be In progress: the addressee is offered that move (the task's id).
    start_task_id: str | None = None


def card_view(item: ThreadInteraction, viewer: User | None = None) -> CardView:
    """The card's state (from the service) in words, for this viewer."""
    payload = intent_payload(item)
    current = card_state(item)
    state = current.state
    viewer = viewer if viewer is not None else current_user
    service_name = payload.get("serviceName") or payload.get("serviceSlug") or "the service"
    outcomes = {
        "accepted": f"{service_name} connected",
        "declined": "Connection declined",
        "superseded": "Request superseded",
        "expired": "Connection request expired",
    }
    definition = get_app(payload.get("serviceSlug", "")) if payload.get("serviceSlug") else None
    logo = payload.get("serviceLogoUrl") or (logo_url(definition) if definition else None)
    dark = payload.get("serviceDarkLogoUrl") or (logo_url(definition, dark=True) if definition else None)
    viewer_is_addressee = bool(
        getattr(viewer, "is_authenticated", False) and cards.is_addressee(item, viewer.id)
    )
    addressee = item.addressee_user
    agent_name = payload.get("requestingAgentName") or (
        item.requesting_agent.name if item.requesting_agent else "An agent"
    )
    return CardView(
        id=str(item.id),
        state=state,
        pending=current.pending,
        is_addressee=viewer_is_addressee,
        service_name=service_name,
        agent_name=agent_name,
        addressee_name=addressee.name if addressee is not None else "the responsible person",
        logo=logo,
        dark_logo=dark if dark != logo else None,
        primary_label=(
            CONTINUE_LABEL if current.setup_saved and state == "requested" else PRIMARY_LABELS.get(state)
        ),
        outcome_text=(
            f"Access granted to {agent_name}"
            if state == "accepted" and current.access_request
            else outcomes.get(state)
        ),
        setup_saved=current.setup_saved,
        retry_text=retry_text(current.failure, service_name) if state == "needs_retry" else None,
        access_request=current.access_request,
        access_tools=(
            tuple(tools_as_they_stand(current.access_request))
            if current.pending and current.access_request
            else ()
        ),
        title=item.title,
        intro=INTRO.format(service=service_name, agent=agent_name),
        asked_at=as_utc(item.created_at) if item.created_at else None,
        resolved_by=_resolved_by(item, current),
        resolved_at=as_utc(item.resolved_at) if current.answered else None,
        continuation_text=_continuation_text(current, agent_name),
        can_decline=current.can_decline,
        start_task_id=(
            str(item.issue_id)
            if current.continuation == Continuation.WHEN_IN_PROGRESS and viewer_is_addressee
            else None
        ),
    )


def _resolved_by(item: ThreadInteraction, current: CardState) -> str | None:
    if not current.answered:
        return None
    if current.state == "declined":
        verb = "Declined"
    else:
        verb = "Granted" if current.access_request is not None else "Connected"
    person = (
        item.resolved_by_user.name if item.resolved_by_user is not None else "someone who left the company"
    )
    return f"{verb} by {person}"


def _continuation_text(current: CardState, agent_name: str) -> str | None:
    """Whether the answer wakes the agent (the service decides; this says it)."""
    if current.continuation is None:
        return None
    if current.continuation == Continuation.TASK_CLOSED:
        return "The task is closed, so the agent is not woken."
    if current.continuation == Continuation.REASSIGNED:
        return f"{agent_name} is not assigned any more, so it is not woken."
    when = " once the task is In progress" if current.continuation == Continuation.WHEN_IN_PROGRESS else ""
    return (
        f"{agent_name} will continue in a new session{when}."
        if current.state == "accepted"
        else f"{agent_name} will continue without it{when}."
    )
