"""What a connection card is now: the card's state machine, decided here once for every place that shows a card.

A pending card is in its phase: `requested` (the agent asked), `authorizing` (a sign-in is under way) or
`needs_retry` (a sign-in or a completion failed); an unknown phase reads as `requested`. A pending card of a closed
task is `expired` (closing the task expires its cards; this covers a card read in between). A resolved card is
`accepted` (connected, or access granted), `declined` (the person said Not now), `superseded` (a request addressed
to someone else replaced it) or `expired` (the task closed or changed hands).

An answered card (accepted or declined) wakes its agent only while the card's task is active for it
(`card.card_task_is_active`, the rule the continuation worker applies); otherwise the task was closed, or the agent
no longer owns it. While the task is not being worked on (Todo, Blocked) an undelivered continuation waits for the
task to move to In progress, and the card says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from app.extensions import db
from app.models import ConnectionIntentDelivery, Issue, ThreadInteraction
from app.services.intents import access_requests
from app.services.intents import audience as intents_audience
from app.services.intents.card import WAKE_STATUSES, card_task_is_active, intent_payload

PENDING_STATES = ("requested", "authorizing", "needs_retry")
ANSWERED_STATES = ("accepted", "declined")
DECLINABLE_STATES = ("requested", "needs_retry")
RESOLVED_STATES = {"accepted": "accepted", "rejected": "declined"}

# Why the last attempt of a `needs_retry` card failed (kept on the card as `lastFailure`; fixed codes only).
WINDOW_CLOSED = "window_closed"
SIGN_IN_CANCELLED = "oauth_access_denied"
FAILURES = frozenset(
    {
        WINDOW_CLOSED,
        SIGN_IN_CANCELLED,
        "oauth_provider_error",
        "oauth_missing_code",
        "oauth_issuer_mismatch",
        "oauth_exchange_failed",
        "oauth_unreachable",
        "oauth_tools_failed",
        "oauth_forbidden",
        "key_rejected",
        "key_unreachable",
        "key_refused",
        "completion_refused",
    }
)


class Continuation(StrEnum):
    """What becomes of the agent's continuation once the card is answered."""

    WAKES = "wakes"
    # Not woken yet: the task is not being worked on (Todo, Blocked); the agent continues once it is In progress.
    WHEN_IN_PROGRESS = "when_in_progress"
    TASK_CLOSED = "task_closed"
    REASSIGNED = "reassigned"


@dataclass(frozen=True)
class CardState:
    """A card's state and the facts its presentation depends on (no secrets, no URLs)."""

    state: str  # requested | authorizing | needs_retry | accepted | declined | superseded | expired
    # The addressee saved a setup for this card (Save & exit): the card offers to continue it.
    setup_saved: bool
    # An access request: {connectionId, connectionName, tools: [{toolName, permission}]} (no setup, a grant).
    access_request: dict | None
    # Set once the card is answered (accepted or declined), else None.
    continuation: Continuation | None = None
    # A `needs_retry` card: why the last attempt failed (a code of FAILURES), when it is known.
    failure: str | None = None

    @property
    def pending(self) -> bool:
        return self.state in PENDING_STATES

    @property
    def answered(self) -> bool:
        return self.state in ANSWERED_STATES

    @property
    def can_decline(self) -> bool:
        """Not now is offered while the card asks (requested) and after a failed attempt (needs_retry)."""
        return self.state in DECLINABLE_STATES


def card_state(interaction: ThreadInteraction) -> CardState:
    """The card's state (see the module docstring); reads the task at most once, and only when the state needs it."""
    payload = intent_payload(interaction)
    access = payload.get(access_requests.ACCESS_REQUEST_KEY)
    saved = intents_audience.card_audience(interaction) is not None
    state = _state(interaction, payload)
    continuation = None
    if state in ANSWERED_STATES:
        continuation = _continuation(interaction, db.session.get(Issue, interaction.issue_id))
    return CardState(
        state=state,
        setup_saved=saved,
        access_request=access if isinstance(access, dict) else None,
        continuation=continuation,
        failure=_failure(payload) if state == "needs_retry" else None,
    )


def _failure(payload: dict) -> str | None:
    failure = payload.get("lastFailure")
    return failure if failure in FAILURES else None


def _state(interaction: ThreadInteraction, payload: dict) -> str:
    if interaction.status == "pending":
        issue = db.session.get(Issue, interaction.issue_id)
        if issue is not None and issue.is_closed:
            return "expired"
        phase = payload.get("phase", "requested")
        return phase if phase in PENDING_STATES else "requested"
    if interaction.status in RESOLVED_STATES:
        return RESOLVED_STATES[interaction.status]
    return "superseded" if (interaction.result or {}).get("outcome") == "superseded" else "expired"


def _continuation(interaction: ThreadInteraction, issue: Issue | None) -> Continuation:
    if issue is None or issue.is_closed:
        return Continuation.TASK_CLOSED
    if not card_task_is_active(interaction, issue):
        return Continuation.REASSIGNED
    if issue.status not in WAKE_STATUSES:
        delivery = db.session.get(ConnectionIntentDelivery, interaction.id)
        if delivery is None or delivery.delivered_at is None:
            return Continuation.WHEN_IN_PROGRESS
    return Continuation.WAKES
