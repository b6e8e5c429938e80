"""The addressed person's side of a card: lock, phase, setup options, complete and decline."""

from __future__ import annotations

import uuid

from sqlalchemy import select

from app.core.errors import Conflict, Forbidden, NotFound, Unprocessable
from app.core.wake_signal import CONTINUATIONS, signal_work
from app.extensions import db
from app.models import (
    ConnectionIntentDelivery,
    GrantDelegation,
    Issue,
    Membership,
    ThreadInteraction,
    ToolConnection,
)
from app.models.base import utcnow
from app.services.access.effective import (
    can_manage_connections,
    connection_access,
    connection_is_live,
)
from app.services.access.rows import connection_is_healthy
from app.services.activity import record_activity
from app.services.cards import addressing, lifecycle
from app.services.connections.audience import add_agent_install
from app.services.connections.endpoint import grant_holds_credentials
from app.services.connections.ownership import ownership_of
from app.services.intents.access_requests import ACCESS_REQUEST_KEY, refuse_changed_tools, requested_scope
from app.services.intents.audience import (
    _apply_card_audience,
    card_audience,
    check_audience_agents,
    require_sharing_authority,
)
from app.services.intents.card import (
    ALREADY_RESOLVED,
    KIND,
    NO_WRITE_ACCESS,
    PHASE_INVALID,
    PHASES,
    TASK_GONE,
    _uuid_or_none,
    adopt_legacy_card,
    card_task_is_active,
    intent_payload,
    is_connection_card,
    retire_oauth_states,
)
from app.services.intents.service import (
    matching_connections,
    resolve_service,
    reusable_by,
    service_slug_of,
)

NO_CREDENTIALS = (
    "The identity this agent would use on this connection holds no credentials. "
    "Sign in or enter the key again before continuing."
)


def lock_intent(interaction_id: uuid.UUID) -> ThreadInteraction:
    """Lock the card for a resolution. The task row is locked first: task, then card is the order every writer
    (card creation, task updates that expire cards) uses, so a resolution racing a close cannot deadlock."""
    issue_id = db.session.scalar(
        select(ThreadInteraction.issue_id).where(ThreadInteraction.id == interaction_id)
    )
    if issue_id is not None:
        db.session.scalar(select(Issue.id).where(Issue.id == issue_id).with_for_update())
    row = db.session.scalar(
        select(ThreadInteraction)
        .where(ThreadInteraction.id == interaction_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if row is None or not is_connection_card(row):
        raise addressing.not_found(KIND)
    adopt_legacy_card(row)
    return row


def require_writer(interaction: ThreadInteraction, user_id: uuid.UUID, *, lock: bool = False) -> Membership:
    query = select(Membership).where(
        Membership.company_id == interaction.company_id, Membership.user_id == user_id
    )
    if lock:
        query = query.with_for_update()
    membership = db.session.scalar(query.execution_options(populate_existing=True))
    if membership is None or not membership.has_write_access:
        raise Forbidden(NO_WRITE_ACCESS)
    return membership


def active_task(interaction: ThreadInteraction) -> Issue:
    issue = db.session.scalar(
        select(Issue)
        .where(Issue.id == interaction.issue_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if issue is None or not card_task_is_active(interaction, issue):
        raise Conflict(TASK_GONE)
    return issue


def set_phase(
    interaction_id: uuid.UUID, user_id: uuid.UUID, phase: str, *, failure: str | None = None
) -> ThreadInteraction:
    """Move a pending card to `phase`. A `needs_retry` keeps why the attempt failed (`failure`, a fixed code from
    `card_state.FAILURES`, never provider text) so the card can say it; any other phase forgets it."""
    if phase not in PHASES:
        raise Unprocessable(PHASE_INVALID)
    interaction = lock_intent(interaction_id)
    addressing.assert_may_answer(interaction, user_id)
    require_writer(interaction, user_id)
    if interaction.status != "pending":
        raise Conflict(ALREADY_RESOLVED)
    active_task(interaction)
    payload = {k: v for k, v in interaction.payload.items() if k != "lastFailure"}
    if phase == "needs_retry" and failure is not None:
        payload["lastFailure"] = failure
    interaction.payload = {**payload, "phase": phase}
    db.session.flush()
    return interaction


def setup_options(interaction: ThreadInteraction) -> dict:
    """What the addressed person needs to answer the card: selection metadata only, never configuration."""
    payload = intent_payload(interaction)
    slug = payload.get("serviceSlug", "")
    agent_id = _uuid_or_none(payload.get("requestingAgentId"))
    service = resolve_service(interaction.company_id, slug, interaction.addressee_user_id, agent_id)
    if service is None:
        raise NotFound("Connection service is no longer available")
    eligible = [
        c
        for c in matching_connections(interaction.company_id, slug)
        if reusable_by(c, interaction.addressee_user_id, agent_id)
    ]
    # Whose account each reuse would act with, named in the dialog (read for all of them together).
    owners = ownership_of(eligible)
    return {
        "version": 1,
        "service": {
            **service.described(),
            "state": "needs_user_action" if eligible else "available",
            "connectionId": None,
        },
        "existingConnections": [
            {
                "id": str(c.id),
                "name": c.name,
                "status": c.status,
                "enabled": c.enabled,
                "providerAccountLabel": c.provider_account_label,
                "whose": owners[c.id].whose(interaction.addressee_user_id)
                if interaction.addressee_user_id
                else None,
            }
            for c in eligible
        ],
        "requestedAgentId": payload.get("requestingAgentId"),
    }


def requester_of(interaction: ThreadInteraction) -> uuid.UUID | None:
    """The agent that asked for the card."""
    return _uuid_or_none(intent_payload(interaction).get("requestingAgentId"))


def _resolve(
    interaction: ThreadInteraction, user_id: uuid.UUID, status: lifecycle.CardStatus, result: dict
) -> None:
    """Resolve once (409 when it no longer waits), and queue the agent's continuation."""
    if not lifecycle.resolve_pending_card(interaction, status, result, by_user_id=user_id):
        raise Conflict(ALREADY_RESOLVED)
    retire_oauth_states([interaction.id])
    db.session.add(
        ConnectionIntentDelivery(
            interaction_id=interaction.id, company_id=interaction.company_id, next_attempt_at=utcnow()
        )
    )
    db.session.flush()
    # NOTIFY at commit: a listening worker delivers it if the request does not.
    signal_work(db.session, CONTINUATIONS)


def complete_intent(
    interaction_id: uuid.UUID, user_id: uuid.UUID, connection_id: uuid.UUID
) -> ThreadInteraction:
    """Connect the chosen connection to the requesting agent and resolve the card as connected, atomically."""
    interaction = lock_intent(interaction_id)
    addressing.assert_may_answer(interaction, user_id)
    if interaction.status != "pending":
        result = interaction.result or {}
        if (
            interaction.status == "accepted"
            and result.get("connectionId") == str(connection_id)
            and interaction.resolved_by_user_id == user_id
        ):
            return interaction
        raise Conflict(ALREADY_RESOLVED)
    active_task(interaction)
    membership = require_writer(interaction, user_id, lock=True)
    payload = interaction.payload or {}
    agent_id = uuid.UUID(payload["requestingAgentId"])
    connection = db.session.scalar(
        select(ToolConnection)
        .where(ToolConnection.id == connection_id, ToolConnection.company_id == interaction.company_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    access_request = payload.get(ACCESS_REQUEST_KEY)
    if (
        connection is None
        or service_slug_of(connection) != payload.get("serviceSlug")
        or (access_request is not None and access_request.get("connectionId") != str(connection.id))
    ):
        raise NotFound("Connection does not match this intent")
    if access_request is not None:
        refuse_changed_tools(access_request)
    if not connection_is_live(connection) or not connection_is_healthy(connection):
        raise Conflict("Finish and test this connection before using it for the task")
    grants = [g for g in connection.grants if g.status == "active"]
    personal = next((g for g in grants if g.kind == "user" and g.subject_user_id == user_id), None)
    dedicated = next((g for g in grants if g.kind == "agent" and g.subject_agent_id == agent_id), None)
    organization = [g for g in grants if g.kind == "organization"]
    if personal is None and dedicated is None and not organization:
        raise Conflict("This connection has no usable identity grant")
    if personal is None and dedicated is None and not can_manage_connections(membership):
        raise Forbidden("Sharing a company connection requires connection-management authority")
    saved = card_audience(interaction)
    if saved is not None and saved.connection_id != connection.id:
        saved = None  # the audience was chosen for another draft; reusing a connection stays requester-only
    if saved is not None:
        check_audience_agents(connection.company_id, saved.audience)
        require_sharing_authority(membership, saved.audience, agent_id)
    if personal is not None and dedicated is None:
        delegated = db.session.scalar(
            select(GrantDelegation).where(
                GrantDelegation.grant_id == personal.id, GrantDelegation.agent_id == agent_id
            )
        )
        if delegated is None:
            db.session.add(
                GrantDelegation(
                    company_id=connection.company_id,
                    grant_id=personal.id,
                    agent_id=agent_id,
                    created_by_user_id=user_id,
                )
            )
            record_activity(
                company_id=connection.company_id,
                actor_type="user",
                actor_id=user_id,
                action="tool_connection.grant_delegated",
                entity_type="tool_connection",
                entity_id=connection.id,
                agent_id=agent_id,
                details={"grantId": str(personal.id), "interactionId": str(interaction.id)},
            )
    add_agent_install(connection, agent_id, user_id, tool_scope=requested_scope(access_request))
    if saved is not None:
        _apply_card_audience(connection, saved, agent_id, user_id)
    db.session.flush()
    access = connection_access(connection.company_id, agent_id, user_id, connection.id)
    if access is None or not access.has_usable_tools:
        raise Conflict(
            "This connection has no permitted tools. Review its action permissions before continuing."
        )
    if not access.has_identity:
        raise Conflict(
            "This identity is not the connection this agent can execute. "
            "Resolve conflicting identities before continuing."
        )
    if access.grant is None or not grant_holds_credentials(connection, access.grant):
        raise Conflict(NO_CREDENTIALS)
    _resolve(
        interaction,
        user_id,
        lifecycle.CardStatus.ACCEPTED,
        {"version": 1, "outcome": "connected", "connectionId": str(connection.id)},
    )
    record_activity(
        company_id=interaction.company_id,
        actor_type="user",
        actor_id=user_id,
        action="issue.connection_intent_connected",
        entity_type="issue",
        entity_id=interaction.issue_id,
        agent_id=agent_id,
        details={
            "interactionId": str(interaction.id),
            "connectionId": str(connection.id),
            "requestingAgentId": str(agent_id),
        },
    )
    return interaction


def decline_intent(interaction_id: uuid.UUID, user_id: uuid.UUID, reason: str | None) -> ThreadInteraction:
    """Resolve the card as declined (the card's "Not now"); the continuation is told to pursue alternatives."""
    interaction = lock_intent(interaction_id)
    addressing.assert_may_answer(interaction, user_id)
    if interaction.status != "pending":
        raise Conflict(ALREADY_RESOLVED)
    require_writer(interaction, user_id, lock=True)
    reason = (reason or "").strip() or None
    _resolve(
        interaction,
        user_id,
        lifecycle.CardStatus.REJECTED,
        {"version": 1, "outcome": "declined", "reason": reason},
    )
    record_activity(
        company_id=interaction.company_id,
        actor_type="user",
        actor_id=user_id,
        action="issue.connection_intent_declined",
        entity_type="issue",
        entity_id=interaction.issue_id,
        agent_id=interaction.requesting_agent_id,
        details={"interactionId": str(interaction.id), "reason": reason},
    )
    return interaction
