"""Setting up a connection for a card, from any host: the card's audience, the draft bound to it, and finishing
that draft so the card resolves in the same transaction.

One owner for the audience a card's addressee chose: the interaction (`payload.audience`, as
`{connectionId, allAgents, agentIds}`, where `connectionId` is the draft whose setup will finish the card). Saving it
grants nothing. Binding a draft to a card empties the draft's own audience, so activating the draft installs nothing
by itself; `resolution.complete_intent` applies the saved audience after it rechecks task ownership, membership and
sharing authority, in the transaction that resolves the card. Every host (the card dialog, the Apps connect page, the
Permissions page's finish, the JSON API, the OAuth callback) finishes a draft through `finish_setup` or
`finish_card_oauth`, so finishing a card's draft anywhere resolves its card.
"""

from __future__ import annotations

import uuid

from app.catalog.schema import AppDefinition
from app.core.errors import Conflict, NotFound, ProviderRefused, ServiceError, ValidationFailed
from app.extensions import db
from app.models import Issue, Membership, OAuthState, ThreadInteraction, ToolConnection
from app.models.connections import ConnectionStatus
from app.services.access.effective import can_configure
from app.services.cards import addressing
from app.services.connections import card_binding
from app.services.connections.audience import Audience
from app.services.connections.settings import UNSET, Unset, update_connection
from app.services.connections.setup import finish_connection, record_setup_failed
from app.services.intents import audience as intents_audience
from app.services.intents import card as intents_card
from app.services.intents import resolution, service
from app.services.oauth import callback as oauth_callback
from app.services.oauth.errors import CARD_CLOSED, NEEDS_REAUTHORIZATION

NO_AUDIENCE = Audience(all_agents=False)


class CardClosed(Conflict):
    """The card stopped waiting (closed task, new assignee or responsible person, superseded, resolved)."""

    def __init__(self) -> None:
        super().__init__(CARD_CLOSED)


class CardCompletionFailed(ServiceError):
    """The connection was set up but the card's completion was refused; nothing of it is kept."""

    status = 409

    def __init__(self, interaction_id: uuid.UUID, message: str):
        super().__init__(message)
        self.interaction_id = interaction_id


def requester_name(interaction: ThreadInteraction) -> str:
    payload = interaction.payload or {}
    return payload.get("requestingAgentName") or "The requesting agent"


def keep_requester_error(interaction: ThreadInteraction) -> ValidationFailed:
    name = requester_name(interaction)
    return ValidationFailed(
        [
            {
                "loc": ["audience", "agentIds"],
                "msg": f"Keep {name} selected: it asked for this connection.",
                "type": "value_error",
            }
        ]
    )


def bound_cards(connection: ToolConnection, user_id: uuid.UUID) -> list[ThreadInteraction]:
    """The pending cards, addressed to this person, whose saved setup this draft finishes, oldest first (several
    when tasks asked for one service and the person saved each card's setup on their one draft)."""
    if connection.status != "draft":
        return []
    return [
        row
        for row in card_binding.pending_cards_bound_to(connection)
        if addressing.is_addressee(row, user_id)
    ]


def bound_card(
    connection: ToolConnection, user_id: uuid.UUID, card_id: uuid.UUID | None = None
) -> ThreadInteraction | None:
    """The card finishing this draft answers first: `card_id` when it is bound to the draft (the card whose
    dialog finishes it), else the oldest bound card (if any)."""
    cards = bound_cards(connection, user_id)
    return next((row for row in cards if row.id == card_id), cards[0] if cards else None)


def forget_saved_setup(card: ThreadInteraction) -> None:
    """The card keeps waiting, but the setup it saved is gone (its draft was deleted, or finished for another
    card without serving this one): it asks again from the start, with no "Setup saved" note."""
    payload = dict(card.payload or {})
    payload.pop(intents_card.AUDIENCE_KEY, None)
    if payload.get("phase") == "authorizing":
        payload["phase"] = "requested"
    card.payload = payload
    db.session.flush()


def saved_draft(interaction: ThreadInteraction, membership: Membership) -> ToolConnection | None:
    """The draft a card's saved setup continues, while it is still a draft this person may configure."""
    saved = intents_audience.card_audience(interaction)
    if saved is None:
        return None
    draft = db.session.get(ToolConnection, saved.connection_id)
    if (
        draft is None
        or draft.company_id != interaction.company_id
        or draft.status != "draft"
        or not can_configure(membership, draft)
    ):
        return None
    return draft


def save_card_audience(
    interaction_id: uuid.UUID,
    membership: Membership,
    connection: ToolConnection,
    audience: Audience,
    *,
    require_requester: bool = True,
) -> ThreadInteraction:
    """Save the chosen audience on the card, bound to the draft (grants nothing).

    Before a sign-in or a finish the requesting agent must be in it; Save & exit may keep an incomplete choice.
    An audience wider than the requester needs connection-management authority (checked again at completion).
    """
    interaction = resolution.lock_intent(interaction_id)
    addressing.assert_may_answer(interaction, membership.user_id)
    resolution.require_writer(interaction, membership.user_id)
    if interaction.status != "pending":
        raise CardClosed()
    resolution.active_task(interaction)
    requester = resolution.requester_of(interaction)
    if (
        connection.company_id != interaction.company_id
        or connection.status != "draft"
        or service.service_slug_of(connection) != (interaction.payload or {}).get("serviceSlug")
        or not can_configure(membership, connection)
    ):
        raise NotFound("Connection does not match this intent")
    if require_requester and not audience.all_agents and requester not in audience.agent_ids:
        raise keep_requester_error(interaction)
    intents_audience.check_audience_agents(interaction.company_id, audience)
    if requester is not None:
        intents_audience.require_sharing_authority(membership, audience, requester)
    saved = intents_audience.CardAudience(connection.id, audience)
    interaction.payload = {**(interaction.payload or {}), intents_card.AUDIENCE_KEY: saved.to_json()}
    if (connection.config or {}).get("draftAudience") != NO_AUDIENCE.to_json():
        connection.config = {**(connection.config or {}), "draftAudience": NO_AUDIENCE.to_json()}
    db.session.flush()
    return interaction


def save_setup_choices(
    membership: Membership,
    draft: ToolConnection,
    app_definition: AppDefinition,
    *,
    method_config: dict | None | Unset = UNSET,
    audience: Audience | Unset = UNSET,
) -> ThreadInteraction | None:
    """Before a provider sign-in: save the draft's public values, and its audience where it belongs (on the
    draft's card when it has one, else on the draft). Grants nothing. Returns the card, if any."""
    card = bound_card(draft, membership.user_id)
    if method_config is not UNSET or (audience is not UNSET and card is None):
        update_connection(
            membership,
            draft,
            app_definition,
            method_config=method_config,
            audience=audience if card is None else UNSET,
        )
    if card is not None and audience is not UNSET:
        save_card_audience(card.id, membership, draft, audience)
    return card


def prepare_card_sign_in(
    membership: Membership, connection: ToolConnection, interaction_id: uuid.UUID
) -> None:
    """Before the addressee signs a draft in for a card: the draft finishes that card with the card's audience.

    A draft made without the card (no saved audience bound to it) is bound now with the requesting agent alone, so
    its own audience (company-wide by default) never applies; a saved audience that leaves the requester out (Save
    & exit keeps one) is refused. Someone else's start is refused at the callback; a reconnect has no audience."""
    interaction = db.session.get(ThreadInteraction, interaction_id)
    if (
        connection.status != "draft"
        or interaction is None
        or interaction.company_id != connection.company_id
        or not addressing.is_addressee(interaction, membership.user_id)
    ):
        return
    requester = resolution.requester_of(interaction)
    saved = intents_audience.card_audience(interaction)
    if saved is None or saved.connection_id != connection.id:
        save_card_audience(
            interaction.id,
            membership,
            connection,
            Audience(False, (requester,) if requester is not None else ()),
        )
    elif (
        requester is not None and not saved.audience.all_agents and requester not in saved.audience.agent_ids
    ):
        raise keep_requester_error(interaction)


def bound_card_id(connection: ToolConnection, user_id: uuid.UUID) -> uuid.UUID | None:
    card = bound_card(connection, user_id)
    return card.id if card is not None else None


def finish_setup(
    membership: Membership,
    connection: ToolConnection,
    app_definition: AppDefinition,
    *,
    credentials: dict | None = None,
    method_config: dict | None | Unset = UNSET,
    audience: Audience | Unset = UNSET,
    agent_instructions: dict | None | Unset = UNSET,
    card_id: uuid.UUID | None = None,
) -> ThreadInteraction | None:
    """Verify, store and activate (API-key methods), from any host. A draft bound to a card completes the card in
    the same transaction with the card's saved audience; returns the resolved card (`card_id`'s when the host is
    that card's dialog), or None for a plain setup. Every other card bound to the draft resolves with it
    (`_complete_others`).

    Raises what `finish_connection` raises (the form shows it; the card keeps waiting), and CardCompletionFailed
    when the card's completion is refused (the caller rolls back and moves the card to `needs_retry`).
    """
    cards = bound_cards(connection, membership.user_id)
    card = bound_card(connection, membership.user_id, card_id)
    if card is not None and audience is not UNSET:
        save_card_audience(card.id, membership, connection, audience)
    finish_connection(
        membership,
        connection,
        app_definition,
        credentials=credentials,
        method_config=method_config,
        # A card's draft installs nothing by itself: the card's completion applies the saved audience.
        audience=audience if card is None else UNSET,
        agent_instructions=agent_instructions,
    )
    if card is None:
        return None
    resolved = _complete(card.id, membership, connection)
    _complete_others([row.id for row in cards if row.id != card.id], membership, connection)
    return resolved


def reconnectable_connection(
    interaction: ThreadInteraction, membership: Membership, app_definition: AppDefinition | None
) -> ToolConnection | None:
    """The service's connection this person may reconnect (the oldest), or None: Disconnected, or active but its
    provider sign-in stopped working (needs reauthorization). The card's dialog offers Reconnect of that
    connection, keeping its id and settings, rather than a new setup ("Honcho 2")."""
    if app_definition is None or not app_definition.methods:
        return None
    return next(
        (
            c
            for c in service.matching_connections(interaction.company_id, app_definition.slug)
            if needs_reconnect(c) and can_configure(membership, c)
        ),
        None,
    )


def needs_reconnect(connection: ToolConnection) -> bool:
    return connection.status == ConnectionStatus.DISCONNECTED or (
        connection.status == ConnectionStatus.ACTIVE and connection.health_status == NEEDS_REAUTHORIZATION
    )


def card_is_open(interaction_id: uuid.UUID) -> bool:
    """Whether the card still waits for an answer on an active task (a read, no lock: callers recheck)."""
    interaction = db.session.get(ThreadInteraction, interaction_id)
    if interaction is None or interaction.kind != intents_card.KIND or interaction.status != "pending":
        return False
    return intents_card.card_task_is_active(interaction, db.session.get(Issue, interaction.issue_id))


def finish_card_oauth(
    membership: Membership,
    state: OAuthState,
    connection: ToolConnection,
    signed_in: oauth_callback.SignedIn,
) -> ThreadInteraction:
    """Store a card's sign-in and complete the card, in one transaction with the task and card locked.

    A card that stopped waiting meanwhile raises CardClosed before any token is stored.
    """
    if state.interaction_id is None:  # a sign-in started outside a card
        raise addressing.not_found(intents_card.KIND)
    interaction = resolution.lock_intent(state.interaction_id)
    if interaction.status != "pending":
        raise CardClosed()
    try:
        resolution.active_task(interaction)
    except Conflict:
        raise CardClosed() from None
    others = [row.id for row in bound_cards(connection, membership.user_id) if row.id != interaction.id]
    oauth_callback.store_authorization(membership, state, connection, signed_in)
    resolved = _complete(interaction.id, membership, connection)
    _complete_others(others, membership, connection)
    return resolved


def _complete(
    interaction_id: uuid.UUID, membership: Membership, connection: ToolConnection
) -> ThreadInteraction:
    try:
        return resolution.complete_intent(interaction_id, membership.user_id, connection.id)
    except ServiceError as err:
        raise CardCompletionFailed(interaction_id, err.message) from None


def _complete_others(card_ids: list[uuid.UUID], membership: Membership, connection: ToolConnection) -> None:
    """The other cards bound to the draft just finished: each resolves with it as connected where it now serves
    the card (`complete_intent`'s checks, each in a savepoint); a card it cannot serve keeps waiting without its
    saved setup (`forget_saved_setup`), so no card is left saying "Setup saved" about a draft that is gone."""
    for card_id in card_ids:
        try:
            with db.session.begin_nested():
                resolution.complete_intent(card_id, membership.user_id, connection.id)
        except ServiceError:
            card = db.session.get(ThreadInteraction, card_id)
            if card is not None and card.status == "pending":
                forget_saved_setup(card)


# What a provider answered to an attempt (a refused key, no answer, another refusal); a sign-in this Switchboard
# cannot start (no OAuth client) is not an attempt the person can retry.
RETRYABLE_REFUSALS = ("rejected", "unreachable", "refused")


def setup_refused(
    membership: Membership,
    connection: ToolConnection,
    refusal: ProviderRefused,
    interaction_id: uuid.UUID | None = None,
) -> None:
    """A setup the provider refused (after the caller rolled back): recorded as a failed setup, and the card it
    answers (`interaction_id`, else the person's card the draft is bound to) asks to try again."""
    card_id = interaction_id or bound_card_id(connection, membership.user_id)
    if card_id is not None and refusal.kind in RETRYABLE_REFUSALS:
        mark_needs_retry(card_id, membership.user_id, f"key_{refusal.kind}")
    record_setup_failed(membership, connection, refusal.message)


def mark_needs_retry(interaction_id: uuid.UUID, user_id: uuid.UUID, failure: str | None = None) -> None:
    """After a failed sign-in or a refused completion (rolled back): the card waits again with "Try again".
    A card that stopped waiting meanwhile, or that this person may no longer answer, is left as it is; what the
    caller recorded of the failure is kept (only this step's savepoint is rolled back)."""
    try:
        with db.session.begin_nested():
            resolution.set_phase(interaction_id, user_id, "needs_retry", failure=failure)
    except ServiceError:
        pass


OUTCOMES = {"accepted": "connected", "rejected": "declined"}


def card_outcome(interaction_id: uuid.UUID) -> str:
    """What the card is now, for the sign-in window's message: connected, declined, needs_retry or expired."""
    db.session.expire_all()
    interaction = db.session.get(ThreadInteraction, interaction_id)
    if interaction is None:
        return "expired"
    if interaction.status == "pending":
        return "needs_retry" if (interaction.payload or {}).get("phase") == "needs_retry" else "pending"
    return OUTCOMES.get(interaction.status, "expired")
