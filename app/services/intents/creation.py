"""Opening a card: create, reuse or supersede the pending card for one run, person and service."""

from __future__ import annotations

import functools
import uuid

from sqlalchemy import Select, bindparam, select

from app.core.errors import Conflict
from app.extensions import db
from app.models import (
    Agent,
    Issue,
    ThreadInteraction,
)
from app.models.base import utcnow
from app.models.keys import REPAIR_MARK, access_request_digest, card_key, repair_key
from app.services.activity import record_activity
from app.services.cards import lifecycle
from app.services.intents.access_requests import ACCESS_REQUEST_KEY
from app.services.intents.card import (
    CLOSED_ISSUE,
    CONNECTION_KINDS,
    KEY_REUSED,
    KIND,
    adopted_connection_cards,
    intent_payload,
    retire_oauth_states,
)
from app.services.intents.service import ServiceIdentity

# --- creating cards ------------------------------------------------------------------------------------------


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


def _answered_by_key(issue: Issue, key: str) -> ThreadInteraction | None:
    """The latest card the person answered (connected or declined) under this key or one of its repair keys."""
    return db.session.scalar(
        select(ThreadInteraction)
        .where(
            ThreadInteraction.company_id == issue.company_id,
            ThreadInteraction.issue_id == issue.id,
            (ThreadInteraction.idempotency_key == key)
            | ThreadInteraction.idempotency_key.startswith(f"{key}{REPAIR_MARK}", autoescape=True),
            ThreadInteraction.status.in_(("accepted", "rejected")),
        )
        .order_by(ThreadInteraction.resolved_at.desc(), ThreadInteraction.created_at.desc())
        .limit(1)
    )


@functools.cache
def _pending_id_statement() -> Select[tuple[uuid.UUID, dict]]:
    """`_pending_by_key` for the id and payload alone, built once (three parameters: company, task, key)."""
    return select(ThreadInteraction.id, ThreadInteraction.payload).where(
        ThreadInteraction.company_id == bindparam("company_id"),
        ThreadInteraction.issue_id == bindparam("issue_id"),
        ThreadInteraction.idempotency_key == bindparam("key"),
        ThreadInteraction.status == "pending",
    )


def pending_card_id(issue: Issue, key: str, digest: str | None = None) -> uuid.UUID | None:
    """The id of the card pending under this key on the task, read without a lock (a repeat request's answer),
    when it asks what the request asks (`digest`: the access request's, None for a plain request); a card under
    the key that asks for something else is left to `create_connection_intent`, which refuses it (409).

    Safe without the task lock: a card is only created pending under that lock, after the checks that could
    refuse it (a decline in this continuation: see `runtime.request`), so a card found pending passed them. A
    resolution or expiry racing this read either committed before it (the card is no longer pending and is not
    found) or commits after it (the request answered first, as if it had come first).
    """
    row = db.session.execute(
        _pending_id_statement(), {"company_id": issue.company_id, "issue_id": issue.id, "key": key}
    ).first()
    if row is None or access_request_digest((row.payload or {}).get(ACCESS_REQUEST_KEY)) != digest:
        return None
    return row.id


def request_digest(row: ThreadInteraction) -> str | None:
    """What a card asks for beyond its service: its access request's digest (None for a plain card)."""
    return access_request_digest((row.payload or {}).get(ACCESS_REQUEST_KEY))


def _same_request(
    row: ThreadInteraction,
    *,
    run_id: uuid.UUID,
    addressee_user_id: uuid.UUID,
    slug: str,
    digest: str | None,
) -> bool:
    """The row under a key asks what the request asks (`reference.md` 5.6: kind, source run, addressee, service
    and access request)."""
    return (
        row.kind == KIND
        and row.source_run_id == run_id
        and row.addressee_user_id == addressee_user_id
        and (row.payload or {}).get("serviceSlug") == slug
        and request_digest(row) == digest
    )


def _pending_for_agent(issue: Issue, agent_id: uuid.UUID, slug: str) -> list[ThreadInteraction]:
    """The task's pending cards of this agent for this service, oldest first (legacy ones adopted: called with
    the task locked, by a request that may reuse or supersede them)."""
    rows = db.session.scalars(
        select(ThreadInteraction)
        .where(
            ThreadInteraction.issue_id == issue.id,
            ThreadInteraction.kind.in_(CONNECTION_KINDS),
            ThreadInteraction.status == "pending",
        )
        .order_by(ThreadInteraction.created_at)
        .execution_options(populate_existing=True)
    )
    candidates = [
        row
        for row in rows
        if row.kind == KIND or intent_payload(row).get("requestingAgentId") == str(agent_id)
    ]
    return [
        row
        for row in adopted_connection_cards(candidates)
        if row.requesting_agent_id == agent_id and (row.payload or {}).get("serviceSlug") == slug
    ]


def create_connection_intent(
    issue: Issue,
    agent: Agent,
    service: ServiceIdentity,
    *,
    addressee_user_id: uuid.UUID,
    run_id: uuid.UUID,
    access_request: dict | None = None,
) -> tuple[ThreadInteraction, bool]:
    """Create the pending card, or return the one already pending for this run, or for this task, requester,
    addressee, service and access request. A card asking the same of someone else is superseded; cards asking
    for other tools (or a plain card and an access card) are other requests and each keeps its own card.

    A pending card under this request's key that asks for something else (a card keyed before keys named access
    requests) is refused with 409 (`KEY_REUSED`, `reference.md` 5.6), so the agent is never told a card was sent
    for what it did not ask. Returns (interaction, created).
    """
    key = card_key(run_id, addressee_user_id, service.slug, access_request)
    digest = access_request_digest(access_request)
    same = functools.partial(
        _same_request, run_id=run_id, addressee_user_id=addressee_user_id, slug=service.slug, digest=digest
    )
    existing = _pending_by_key(issue, key)
    if existing is not None:
        if not same(existing):
            raise Conflict(KEY_REUSED)
        return existing, False
    # A card answered under this key is never replaced under it (reference.md 5.6 step 2): a declined one is
    # returned (the caller answers "already resolved"); after an accepted one the connection stopped working, so a
    # new card, under a repair key that names it, asks to repair it.
    answered = _answered_by_key(issue, key)
    if answered is not None:
        if answered.status != "accepted":
            return answered, False
        key = repair_key(key, answered.id)
        existing = _pending_by_key(issue, key)
        if existing is not None:
            return existing, False
    # Serialize requests on this task (PostgreSQL); SQLite serializes writers itself.
    locked = db.session.scalar(
        select(Issue).where(Issue.id == issue.id).with_for_update().execution_options(populate_existing=True)
    )
    if locked is None or locked.is_closed or locked.assignee_agent_id != agent.id:
        raise Conflict(CLOSED_ISSUE)
    same_service = [
        row for row in _pending_for_agent(issue, agent.id, service.slug) if request_digest(row) == digest
    ]
    for row in same_service:
        if row.addressee_user_id == addressee_user_id:
            return row, False
    interaction = ThreadInteraction(
        company_id=issue.company_id,
        issue_id=issue.id,
        kind=KIND,
        title=f"Grant {service.name} access to {agent.name}?"
        if access_request
        else f"Connect {service.name}",
        summary=f"{agent.name} needs this connection to continue.",
        payload={
            "version": 1,
            "serviceSlug": service.slug,
            "serviceName": service.name,
            "serviceLogoUrl": service.logo_url,
            "requestingAgentId": str(agent.id),
            "requestingAgentName": agent.name,
            "phase": "requested",
            **({ACCESS_REQUEST_KEY: access_request} if access_request else {}),
        },
        idempotency_key=key,
        addressee_user_id=addressee_user_id,
        requesting_agent_id=agent.id,
        source_run_id=run_id,
    )
    # Another request may have inserted the same pending key first: the database decided, so use its row.
    opened = lifecycle.open_card(
        interaction, winner=lambda: _pending_by_key(issue, key), supersedes=same_service
    )
    if opened is not interaction:
        if not same(opened):
            raise Conflict(KEY_REUSED)
        return opened, False
    retire_oauth_states([row.id for row in same_service])
    locked.updated_at = utcnow()
    db.session.flush()
    return interaction, True


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
