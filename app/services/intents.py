"""Connection intents: the task-thread card an agent opens when it needs a service connected.

Lifecycle: `create_connection_intent` (create, reuse or supersede a pending card), `set_phase` while pending, then
exactly one resolution: `complete_intent` (connected) or `decline_intent` (declined), each writing a continuation
outbox row in the same transaction; or expiry when the task closes or changes hands (`expire_intents_for_issue`).

Payloads carry only service identity, requesting-agent identity and a safe phase: never credentials or URLs beyond
the logo path. The database enforces one pending card per idempotency key; the service handles the conflict.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import delete, exists, or_, select, update
from sqlalchemy.exc import IntegrityError

from app.catalog.loader import get_app, logo_url
from app.core.errors import Conflict, Forbidden, NotFound, Unprocessable
from app.extensions import db
from app.models import (
    Agent,
    ConnectionGrant,
    ConnectionIntentDelivery,
    GrantDelegation,
    Issue,
    Membership,
    OAuthState,
    ThreadInteraction,
    ToolConnection,
)
from app.models.base import utcnow
from app.models.connections import ATTENTION_HEALTH, CUSTOM_APP_SLUG
from app.services import card_binding
from app.services.access.effective import can_manage_connections, effective_access
from app.services.activity import record_activity
from app.services.connections import Audience, add_agent_install, add_company_install

KIND = "connection_intent"
PHASES = ("requested", "authorizing", "needs_retry")
PHASE_INVALID = "phase must be requested, authorizing, or needs_retry"
NOT_ADDRESSEE = "Only the addressed user can act on this connection request"
ALREADY_RESOLVED = "Connection intent is already resolved"
NO_WRITE_ACCESS = "Addressed user is no longer authorized for company write access"
TASK_GONE = "Connection request no longer belongs to an active task"
CLOSED_ISSUE = "Cannot create an interaction on a closed issue"
CONNECTION_PREFIX = "connection:"
ISSUE_CLOSED = "issue_closed"
ASSIGNMENT_CHANGED = "assignment_changed"
RESPONSIBLE_CHANGED = "The responsible person changed"
CARD_CLOSED = "This request was closed before sign-in finished"
AUDIENCE_KEY = card_binding.AUDIENCE_KEY
BROADEN_FORBIDDEN = (
    "Sharing this connection beyond the requesting agent requires connection-management authority"
)


LEGACY_KIND = "request_confirmation"
LEGACY_KEY = "connectionAuthorization"


def is_connection_card(row: ThreadInteraction) -> bool:
    """A connection card: a `connection_intent`, or a legacy `request_confirmation` carrying
    `payload.connectionAuthorization` (still readable and resolvable; new requests never create one)."""
    return row.kind == KIND or (
        row.kind == LEGACY_KIND and isinstance((row.payload or {}).get(LEGACY_KEY), dict)
    )


def intent_payload(row: ThreadInteraction) -> dict:
    """The card's payload in the `connection_intent` shape, whichever kind the row is."""
    if row.kind != LEGACY_KIND or not is_connection_card(row):
        return row.payload or {}
    legacy = row.payload[LEGACY_KEY]
    slug = str(legacy.get("serviceSlug") or legacy.get("service") or "")
    agent_id = legacy.get("requestingAgentId") or (
        str(row.requesting_agent_id) if row.requesting_agent_id else None
    )
    return {
        "version": 1,
        "serviceSlug": slug,
        "serviceName": legacy.get("serviceName") or slug,
        "serviceLogoUrl": legacy.get("serviceLogoUrl"),
        "requestingAgentId": agent_id,
        "requestingAgentName": legacy.get("requestingAgentName"),
        "phase": legacy.get("phase") if legacy.get("phase") in PHASES else "requested",
        "legacy": {"kind": LEGACY_KIND, LEGACY_KEY: legacy},
    }


def adopt_legacy_card(row: ThreadInteraction) -> None:
    """Before a legacy card is acted on, it becomes a `connection_intent` (its original payload kept under
    `legacy`), so every rule and the continuation treat it like any card."""
    if row.kind == LEGACY_KIND and is_connection_card(row):
        row.payload = intent_payload(row)
        row.kind = KIND
        if row.requesting_agent_id is None:
            row.requesting_agent_id = _uuid_or_none(row.payload.get("requestingAgentId"))
        db.session.flush()


@dataclass(frozen=True)
class ServiceIdentity:
    """A connectable service as agents name it: a catalog slug or `connection:<uuid>` for a custom connection."""

    slug: str
    name: str
    description: str | None
    logo_url: str | None
    methods: list[dict]
    source: str  # "catalog" or "configured"
    available: bool
    connection_id: uuid.UUID | None = None


def service_slug_of(connection: ToolConnection) -> str:
    """Custom MCP connections are their own service; catalog connections belong to their app's slug."""
    if connection.app_slug == CUSTOM_APP_SLUG:
        return f"{CONNECTION_PREFIX}{connection.id}"
    return connection.app_slug


def catalog_service(app_definition) -> ServiceIdentity:
    return ServiceIdentity(
        slug=app_definition.slug,
        name=app_definition.name,
        description=app_definition.description,
        logo_url=logo_url(app_definition),
        methods=[{"key": m.key, "label": m.label, "auth": m.auth} for m in app_definition.methods],
        source="catalog",
        available=bool(app_definition.methods),
    )


def configured_service(connection: ToolConnection, custom=None) -> ServiceIdentity:
    """A custom MCP connection as a service; `custom` is the catalog's custom app, when the caller has it."""
    custom = custom or get_app(CUSTOM_APP_SLUG)
    return ServiceIdentity(
        slug=service_slug_of(connection),
        name=connection.name,
        description=None,
        logo_url=logo_url(custom) if custom is not None else None,
        methods=[{"key": "configured", "label": "Use configured connection", "auth": connection.auth_kind}],
        source="configured",
        available=connection.enabled,
        connection_id=connection.id,
    )


def grant_in_audience(grant: ConnectionGrant, user_id: uuid.UUID | None, agent_id: uuid.UUID | None) -> bool:
    """An active grant of the organization, of this person, or of this agent."""
    if grant.status != "active":
        return False
    return (
        grant.kind == "organization"
        or (grant.kind == "user" and user_id is not None and grant.subject_user_id == user_id)
        or (grant.kind == "agent" and agent_id is not None and grant.subject_agent_id == agent_id)
    )


def grant_in_audience_clause(user_id: uuid.UUID | None, agent_id: uuid.UUID | None):
    """`grant_in_audience` as SQL: the connection in the query has an active grant for this audience."""
    audience = [ConnectionGrant.kind == "organization"]
    if user_id is not None:
        audience.append((ConnectionGrant.kind == "user") & (ConnectionGrant.subject_user_id == user_id))
    if agent_id is not None:
        audience.append((ConnectionGrant.kind == "agent") & (ConnectionGrant.subject_agent_id == agent_id))
    return exists().where(
        ConnectionGrant.connection_id == ToolConnection.id,
        ConnectionGrant.status == "active",
        or_(*audience),
    )


def parse_connection_service(slug: str) -> uuid.UUID | None:
    """The connection id of `connection:<uuid>`; identifiers are never interpreted as URLs."""
    if not slug.startswith(CONNECTION_PREFIX):
        return None
    try:
        value = uuid.UUID(slug[len(CONNECTION_PREFIX) :])
    except ValueError:
        return None
    return value if f"{CONNECTION_PREFIX}{value}" == slug else None


def resolve_service(
    company_id: uuid.UUID, slug: str, user_id: uuid.UUID | None, agent_id: uuid.UUID | None
) -> ServiceIdentity | None:
    """The service named by an agent or a card, or None when this audience cannot see such a service."""
    connection_id = parse_connection_service(slug)
    if connection_id is not None:
        connection = db.session.get(ToolConnection, connection_id)
        if (
            connection is None
            or connection.company_id != company_id
            or connection.app_slug != CUSTOM_APP_SLUG
            or connection.status == "archived"
            or not any(grant_in_audience(g, user_id, agent_id) for g in connection.grants)
        ):
            return None
        return configured_service(connection)
    if slug == CUSTOM_APP_SLUG or slug.startswith(CONNECTION_PREFIX):
        return None
    app_definition = get_app(slug)
    return catalog_service(app_definition) if app_definition is not None else None


def matching_connections(company_id: uuid.UUID, slug: str) -> list[ToolConnection]:
    """Non-archived connections of the company that serve this service."""
    connection_id = parse_connection_service(slug)
    query = select(ToolConnection).where(
        ToolConnection.company_id == company_id, ToolConnection.status != "archived"
    )
    if connection_id is not None:
        query = query.where(ToolConnection.id == connection_id, ToolConnection.app_slug == CUSTOM_APP_SLUG)
    else:
        query = query.where(ToolConnection.app_slug == slug)
    return list(db.session.scalars(query.order_by(ToolConnection.id)))


# --- creating cards ------------------------------------------------------------------------------------------


def idempotency_key(run_id: uuid.UUID, user_id: uuid.UUID, slug: str) -> str:
    return f"connection-intent:{run_id}:{user_id}:{slug}"


def _pending_by_key(issue: Issue, key: str) -> ThreadInteraction | None:
    return db.session.scalar(
        select(ThreadInteraction)
        .where(
            ThreadInteraction.company_id == issue.company_id,
            ThreadInteraction.issue_id == issue.id,
            ThreadInteraction.idempotency_key == key,
            ThreadInteraction.status == "pending",
        )
        .execution_options(populate_existing=True)
    )


def _pending_for_agent(issue: Issue, agent_id: uuid.UUID, slug: str) -> list[ThreadInteraction]:
    rows = db.session.scalars(
        select(ThreadInteraction)
        .where(
            ThreadInteraction.issue_id == issue.id,
            ThreadInteraction.kind == KIND,
            ThreadInteraction.status == "pending",
            ThreadInteraction.requesting_agent_id == agent_id,
        )
        .order_by(ThreadInteraction.created_at)
        .execution_options(populate_existing=True)
    )
    return [row for row in rows if (row.payload or {}).get("serviceSlug") == slug]


def create_connection_intent(
    issue: Issue,
    agent: Agent,
    service: ServiceIdentity,
    *,
    addressee_user_id: uuid.UUID,
    run_id: uuid.UUID,
) -> tuple[ThreadInteraction, bool]:
    """Create the pending card, or return the one already pending for this run, or for this task, requester,
    addressee and service. A card for the same service addressed to someone else is superseded.

    Returns (interaction, created).
    """
    key = idempotency_key(run_id, addressee_user_id, service.slug)
    existing = _pending_by_key(issue, key)
    if existing is not None:
        return existing, False
    # Serialize requests on this task (PostgreSQL); SQLite serializes writers itself.
    locked = db.session.scalar(
        select(Issue).where(Issue.id == issue.id).with_for_update().execution_options(populate_existing=True)
    )
    if locked is None or locked.is_closed or locked.assignee_agent_id != agent.id:
        raise Conflict(CLOSED_ISSUE)
    same_service = _pending_for_agent(issue, agent.id, service.slug)
    for row in same_service:
        if row.addressee_user_id == addressee_user_id:
            return row, False
    interaction = ThreadInteraction(
        company_id=issue.company_id,
        issue_id=issue.id,
        kind=KIND,
        status="pending",
        title=f"Connect {service.name}",
        summary=f"{agent.name} needs this connection to continue.",
        payload={
            "version": 1,
            "serviceSlug": service.slug,
            "serviceName": service.name,
            "serviceLogoUrl": service.logo_url,
            "requestingAgentId": str(agent.id),
            "requestingAgentName": agent.name,
            "phase": "requested",
        },
        idempotency_key=key,
        addressee_user_id=addressee_user_id,
        requesting_agent_id=agent.id,
        source_run_id=run_id,
    )
    try:
        with db.session.begin_nested():
            db.session.add(interaction)
            db.session.flush()
    except IntegrityError:
        # Another request inserted the same pending key first: the database decided, so use its row.
        winner = _pending_by_key(issue, key)
        if winner is None:
            raise
        return winner, False
    now = utcnow()
    for row in same_service:
        row.status = "expired"
        row.result = {"version": 1, "outcome": "superseded", "supersededByInteractionId": str(interaction.id)}
        row.resolved_at = now
    retire_oauth_states([row.id for row in same_service])
    locked.updated_at = now
    db.session.flush()
    return interaction, True


# --- expiry --------------------------------------------------------------------------------------------------


def expire_intents_for_issue(issue: Issue, reason: str | None = None) -> int:
    """Expire pending connection cards that the task's new state makes moot; call after any task update.

    A closed task (done/cancelled) expires every pending card (`issue_closed`); otherwise cards requested by an agent
    that no longer owns the task expire with "The task assignment changed". Comments and later runs keep them.
    Returns how many cards expired.
    """
    if reason is None:
        reason = ISSUE_CLOSED if issue.is_closed else ASSIGNMENT_CHANGED
    query = select(ThreadInteraction).where(
        ThreadInteraction.issue_id == issue.id,
        ThreadInteraction.kind == KIND,
        ThreadInteraction.status == "pending",
    )
    rows = list(db.session.scalars(query.with_for_update()))
    if reason == ASSIGNMENT_CHANGED and not issue.is_closed:
        rows = [r for r in rows if r.requesting_agent_id != issue.assignee_agent_id]
    now = utcnow()
    for row in rows:
        row.status = "expired"
        row.resolved_at = now
        if reason == ISSUE_CLOSED:
            row.result = {"version": 1, "outcome": "issue_closed", "reason": None}
        else:
            row.result = {"version": 1, "outcome": "expired", "reason": "The task assignment changed"}
    retire_oauth_states([row.id for row in rows])
    db.session.flush()
    return len(rows)


def supersede_intents_for_responsible_change(issue: Issue) -> int:
    """The task's responsible person changed: pending cards addressed to anyone else are superseded (the next
    request of the agent opens a new card for the new person). Returns how many cards were superseded."""
    rows = list(
        db.session.scalars(
            select(ThreadInteraction)
            .where(
                ThreadInteraction.issue_id == issue.id,
                ThreadInteraction.kind == KIND,
                ThreadInteraction.status == "pending",
            )
            .with_for_update()
        )
    )
    rows = [r for r in rows if r.addressee_user_id != issue.responsible_user_id]
    now = utcnow()
    for row in rows:
        row.status = "expired"
        row.resolved_at = now
        row.result = {
            "version": 1,
            "outcome": "superseded",
            "supersededByInteractionId": None,
            "reason": RESPONSIBLE_CHANGED,
        }
    retire_oauth_states([row.id for row in rows])
    db.session.flush()
    return len(rows)


def retire_oauth_states(interaction_ids: list[uuid.UUID]) -> None:
    """Sign-ins in flight for cards that no longer wait: their state rows go, so a late callback connects nothing
    (reference, `tool_oauth_states`: expiring or superseding an intent deletes its OAuth state rows)."""
    if interaction_ids:
        db.session.execute(
            delete(OAuthState)
            .where(OAuthState.interaction_id.in_(interaction_ids))
            .execution_options(synchronize_session=False)
        )


# --- the audience the addressed person chose -------------------------------------------------------------------


@dataclass(frozen=True)
class CardAudience:
    """The audience saved on a card, bound to the draft connection whose setup will finish the card."""

    connection_id: uuid.UUID
    audience: Audience

    def to_json(self) -> dict:
        return {"connectionId": str(self.connection_id), **self.audience.to_json()}


def card_audience(interaction: ThreadInteraction) -> CardAudience | None:
    """The saved audience of a card (`payload.audience`), or None when none was saved (requester only)."""
    connection_id = card_binding.bound_draft_id(interaction)
    if connection_id is None:
        return None
    saved = interaction.payload[AUDIENCE_KEY]
    agent_ids = tuple(a for a in (_uuid_or_none(v) for v in saved.get("agentIds") or []) if a is not None)
    return CardAudience(connection_id, Audience(bool(saved.get("allAgents")), agent_ids))


def is_broader_than_requester(audience: Audience, requester_id: uuid.UUID) -> bool:
    return audience.all_agents or any(agent_id != requester_id for agent_id in audience.agent_ids)


def require_sharing_authority(membership: Membership, audience: Audience, requester_id: uuid.UUID) -> None:
    """An audience wider than the requesting agent needs tools:manage_connections, for personal connections as
    for organization ones (checked when the audience is saved and again when the card completes)."""
    if is_broader_than_requester(audience, requester_id) and not can_manage_connections(membership):
        raise Forbidden(BROADEN_FORBIDDEN)


def _apply_card_audience(
    connection: ToolConnection, saved: CardAudience, agent_id: uuid.UUID, user_id: uuid.UUID
) -> None:
    """Install the connection for the saved audience, additively (existing installs are kept)."""
    if saved.audience.all_agents:
        add_company_install(connection, user_id)
    for other in saved.audience.agent_ids:
        if other != agent_id:
            add_agent_install(connection, other, user_id)


# --- the addressed person's side -----------------------------------------------------------------------------


def record_card_created(
    *,
    company_id: uuid.UUID,
    agent_id: uuid.UUID,
    issue_id: uuid.UUID,
    run_id: uuid.UUID | None,
    interaction_id: uuid.UUID,
    kind: str,
    purpose: str | None,
) -> None:
    """Activity for a card an agent's run put in a task thread (connection requests and tool approvals alike)."""
    record_activity(
        company_id=company_id,
        actor_type="agent",
        actor_id=agent_id,
        action="issue.thread_interaction_created",
        entity_type="issue",
        entity_id=issue_id,
        agent_id=agent_id,
        run_id=run_id,
        details={"interactionId": str(interaction_id), "interactionKind": kind, "purpose": purpose},
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
        raise NotFound("Connection intent not found")
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


def require_addressee(interaction: ThreadInteraction, user_id: uuid.UUID) -> None:
    if interaction.addressee_user_id != user_id:
        raise Forbidden(NOT_ADDRESSEE)


def active_task(interaction: ThreadInteraction) -> Issue:
    issue = db.session.scalar(
        select(Issue)
        .where(Issue.id == interaction.issue_id)
        .with_for_update()
        .execution_options(populate_existing=True)
    )
    if (
        issue is None
        or issue.is_closed
        or str(issue.assignee_agent_id) != (interaction.payload or {}).get("requestingAgentId")
    ):
        raise Conflict(TASK_GONE)
    return issue


def set_phase(interaction_id: uuid.UUID, user_id: uuid.UUID, phase: str) -> ThreadInteraction:
    if phase not in PHASES:
        raise Unprocessable(PHASE_INVALID)
    interaction = lock_intent(interaction_id)
    require_addressee(interaction, user_id)
    require_writer(interaction, user_id)
    if interaction.status != "pending":
        raise Conflict(ALREADY_RESOLVED)
    active_task(interaction)
    interaction.payload = {**interaction.payload, "phase": phase}
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
        if c.status == "active"
        and c.enabled
        and any(grant_in_audience(g, interaction.addressee_user_id, agent_id) for g in c.grants)
    ]
    return {
        "version": 1,
        "service": {
            "service": service.slug,
            "name": service.name,
            "description": service.description,
            "logoUrl": service.logo_url,
            "methods": service.methods,
            "source": service.source,
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
            }
            for c in eligible
        ],
        "requestedAgentId": payload.get("requestingAgentId"),
    }


def requester_of(interaction: ThreadInteraction) -> uuid.UUID | None:
    """The agent that asked for the card."""
    return _uuid_or_none(intent_payload(interaction).get("requestingAgentId"))


def _uuid_or_none(value) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None


def _resolve(interaction: ThreadInteraction, user_id: uuid.UUID, status: str, result: dict) -> None:
    """Resolve once: the conditional UPDATE also guards backends without row locks."""
    now = utcnow()
    outcome = db.session.execute(
        update(ThreadInteraction)
        .where(ThreadInteraction.id == interaction.id, ThreadInteraction.status == "pending")
        .values(status=status, result=result, resolved_by_user_id=user_id, resolved_at=now, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    if outcome.rowcount != 1:
        raise Conflict(ALREADY_RESOLVED)
    retire_oauth_states([interaction.id])
    db.session.add(
        ConnectionIntentDelivery(
            interaction_id=interaction.id, company_id=interaction.company_id, next_attempt_at=now
        )
    )
    db.session.flush()
    db.session.refresh(interaction)


def complete_intent(
    interaction_id: uuid.UUID, user_id: uuid.UUID, connection_id: uuid.UUID
) -> ThreadInteraction:
    """Connect the chosen connection to the requesting agent and resolve the card as connected, atomically."""
    interaction = lock_intent(interaction_id)
    require_addressee(interaction, user_id)
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
    if connection is None or service_slug_of(connection) != payload.get("serviceSlug"):
        raise NotFound("Connection does not match this intent")
    if (
        connection.status != "active"
        or not connection.enabled
        or connection.health_status in ATTENTION_HEALTH
    ):
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
    add_agent_install(connection, agent_id, user_id)
    if saved is not None:
        _apply_card_audience(connection, saved, agent_id, user_id)
    db.session.flush()
    access = effective_access(
        connection.company_id, agent_id, user_id, connection_ids=[connection.id], with_tools=False
    )
    if not access or not access[0].has_usable_tools:
        raise Conflict(
            "This connection has no permitted tools. Review its action permissions before continuing."
        )
    if access[0].grant is None:
        raise Conflict(
            "This identity is not the connection this agent can execute. "
            "Resolve conflicting identities before continuing."
        )
    _resolve(
        interaction,
        user_id,
        "accepted",
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


def check_audience_agents(company_id: uuid.UUID, audience: Audience) -> None:
    """Agents named in a saved audience that left the company meanwhile refuse the completion."""
    if not audience.agent_ids:
        return
    found = set(
        db.session.scalars(
            select(Agent.id).where(Agent.company_id == company_id, Agent.id.in_(audience.agent_ids))
        )
    )
    if set(audience.agent_ids) - found:
        raise Conflict("An agent chosen for this connection is no longer part of the company")


def decline_intent(interaction_id: uuid.UUID, user_id: uuid.UUID, reason: str | None) -> ThreadInteraction:
    """Resolve the card as declined (the card's "Not now"); the continuation is told to pursue alternatives."""
    interaction = lock_intent(interaction_id)
    require_addressee(interaction, user_id)
    if interaction.status != "pending":
        raise Conflict(ALREADY_RESOLVED)
    require_writer(interaction, user_id, lock=True)
    reason = (reason or "").strip() or None
    _resolve(interaction, user_id, "rejected", {"version": 1, "outcome": "declined", "reason": reason})
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


def interaction_json(interaction: ThreadInteraction) -> dict:
    def s(value):
        return str(value) if value is not None else None

    def iso(value):
        from app.models.base import as_utc

        return as_utc(value).isoformat() if value is not None else None

    return {
        "id": str(interaction.id),
        "companyId": str(interaction.company_id),
        "issueId": str(interaction.issue_id),
        "kind": interaction.kind,
        "status": interaction.status,
        "title": interaction.title,
        "summary": interaction.summary,
        "payload": interaction.payload,
        "result": interaction.result,
        "addresseeUserId": s(interaction.addressee_user_id),
        "requestingAgentId": s(interaction.requesting_agent_id),
        "sourceRunId": s(interaction.source_run_id),
        "resolvedByUserId": s(interaction.resolved_by_user_id),
        "resolvedAt": iso(interaction.resolved_at),
        "createdAt": iso(interaction.created_at),
        "updatedAt": iso(interaction.updated_at),
    }
