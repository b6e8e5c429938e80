"""Continuation delivery: wake the task's assignee exactly once after a connection card is resolved.

Resolving a card (connected or declined) writes a `ConnectionIntentDelivery` row in the same transaction. Delivery
leases a due row by moving `next_attempt_at` one minute ahead (`FOR UPDATE SKIP LOCKED` on PostgreSQL, a conditional
update everywhere) and commits the lease; the lease is the retry time, so a crashed worker's row becomes due again.

Then, in a second transaction, it either retires the row without waking (interaction gone or unresolved, task closed
or reassigned, addressee no longer a member with write access), leaves it for a later attempt (the connection is not
ready for the agent yet, or the task is not in progress or in review), or wakes the assignee with the idempotency key
`connection-intent:<interactionId>:<connected|declined>` and marks the row delivered. The key is unique among live
wakes (a database index), so a crash after enqueue, an overlapping lease or a repeated sweep finds the existing wake
and only marks the row delivered.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from sqlalchemy import select, update

from app.extensions import db
from app.models import Agent, ConnectionIntentDelivery, Issue, Membership, ThreadInteraction
from app.models.base import utcnow
from app.services.access.effective import effective_access
from app.services.runs.wakeups import WakeAlreadyExists, live_wake_for_key, request_wakeup

log = logging.getLogger(__name__)

LEASE_SECONDS = 60
SWEEP_LIMIT = 50
KIND = "connection_intent"
OUTCOMES = {"accepted": "connected", "rejected": "declined"}
WAKE_STATUSES = ("in_progress", "in_review")

WOKEN = "woken"
ALREADY_WOKEN = "already_woken"
RETIRED = "retired"
RETRY = "retry"
NOT_DUE = "not_due"


def wake_key(interaction_id: uuid.UUID | str, outcome: str) -> str:
    return f"connection-intent:{interaction_id}:{outcome}"


def _is_postgres() -> bool:
    return db.session.get_bind().dialect.name == "postgresql"


def _lease(interaction_ids: list[uuid.UUID], now) -> list[uuid.UUID]:
    claimed = []
    for interaction_id in interaction_ids:
        result = db.session.execute(
            update(ConnectionIntentDelivery)
            .where(
                ConnectionIntentDelivery.interaction_id == interaction_id,
                ConnectionIntentDelivery.delivered_at.is_(None),
                ConnectionIntentDelivery.next_attempt_at <= now,
            )
            .values(next_attempt_at=now + timedelta(seconds=LEASE_SECONDS))
            .execution_options(synchronize_session=False)
        )
        if result.rowcount == 1:
            claimed.append(interaction_id)
    return claimed


def claim_due(limit: int = SWEEP_LIMIT, interaction_id: uuid.UUID | None = None) -> list[uuid.UUID]:
    """Lease due rows (all, or just one) and commit the lease; returns the leased interaction ids."""
    now = utcnow()
    query = (
        select(ConnectionIntentDelivery.interaction_id)
        .where(
            ConnectionIntentDelivery.delivered_at.is_(None),
            ConnectionIntentDelivery.next_attempt_at <= now,
        )
        .order_by(ConnectionIntentDelivery.next_attempt_at)
        .limit(limit)
    )
    if interaction_id is not None:
        query = query.where(ConnectionIntentDelivery.interaction_id == interaction_id)
    if _is_postgres():
        query = query.with_for_update(skip_locked=True)
    claimed = _lease(list(db.session.scalars(query)), now)
    db.session.commit()
    return claimed


def _mark_delivered(interaction_id: uuid.UUID) -> None:
    db.session.execute(
        update(ConnectionIntentDelivery)
        .where(
            ConnectionIntentDelivery.interaction_id == interaction_id,
            ConnectionIntentDelivery.delivered_at.is_(None),
        )
        .values(delivered_at=utcnow())
        .execution_options(synchronize_session=False)
    )


def _has_write_access(company_id: uuid.UUID, user_id: uuid.UUID | None) -> bool:
    if user_id is None:
        return False
    membership = db.session.scalar(
        select(Membership).where(Membership.company_id == company_id, Membership.user_id == user_id)
    )
    return membership is not None and membership.has_write_access


def _connection_ready(interaction: ThreadInteraction, agent_id: uuid.UUID) -> bool:
    try:
        connection_id = uuid.UUID(str((interaction.result or {}).get("connectionId")))
    except ValueError:
        return False
    access = effective_access(
        interaction.company_id,
        agent_id,
        interaction.addressee_user_id,
        connection_ids=[connection_id],
        with_tools=False,
    )
    return bool(access) and access[0].is_ready


def deliver_leased(interaction_id: uuid.UUID) -> str:
    """Deliver one leased row (see the module docstring); commits. Returns what happened."""
    delivery = db.session.get(ConnectionIntentDelivery, interaction_id)
    if delivery is None or delivery.delivered_at is not None:
        db.session.rollback()
        return ALREADY_WOKEN
    interaction = db.session.get(ThreadInteraction, interaction_id)
    issue = db.session.get(Issue, interaction.issue_id) if interaction is not None else None
    requesting = (interaction.payload or {}).get("requestingAgentId") if interaction is not None else None
    if (
        interaction is None
        or interaction.company_id != delivery.company_id
        or interaction.kind != KIND
        or interaction.status not in OUTCOMES
        or issue is None
        or issue.company_id != delivery.company_id
        or issue.is_closed
        or issue.assignee_agent_id is None
        or str(issue.assignee_agent_id) != requesting
        or not _has_write_access(delivery.company_id, interaction.addressee_user_id)
    ):
        _mark_delivered(interaction_id)
        db.session.commit()
        return RETIRED
    agent = db.session.get(Agent, issue.assignee_agent_id)
    outcome = OUTCOMES[interaction.status]
    if outcome == "connected" and not _connection_ready(interaction, agent.id):
        db.session.rollback()
        return RETRY
    if issue.status not in WAKE_STATUSES:
        db.session.rollback()
        return RETRY
    key = wake_key(interaction_id, outcome)
    result = ALREADY_WOKEN
    if live_wake_for_key(delivery.company_id, key) is None:
        try:
            request_wakeup(
                agent,
                issue=issue,
                source="automation",
                reason="connection_intent.resolved",
                context={
                    "issueId": str(issue.id),
                    "taskId": str(issue.id),
                    "interactionId": str(interaction_id),
                    "interactionKind": KIND,
                    "interactionStatus": interaction.status,
                    "outcome": outcome,
                    "wakeReason": "connection_intent.resolved",
                    "forceFreshSession": True,
                },
                responsible_user_id=interaction.addressee_user_id,
                idempotency_key=key,
            )
            result = WOKEN
        except WakeAlreadyExists:
            result = ALREADY_WOKEN
    _mark_delivered(interaction_id)
    db.session.commit()
    return result


def deliver(interaction_id: uuid.UUID) -> str:
    """Fast path after a resolution commits: lease this one row if due, then deliver it."""
    if not claim_due(1, interaction_id):
        return NOT_DUE
    return _safe_deliver(interaction_id)


def _safe_deliver(interaction_id: uuid.UUID) -> str:
    try:
        return deliver_leased(interaction_id)
    except Exception:
        # The lease stays; the row is retried when it becomes due again.
        db.session.rollback()
        log.exception("continuation delivery failed for interaction %s", interaction_id)
        return RETRY


def sweep_pending(limit: int = SWEEP_LIMIT) -> dict[str, int]:
    """Lease and deliver up to `limit` due rows; returns a count per result."""
    counts: dict[str, int] = {}
    for interaction_id in claim_due(limit):
        result = _safe_deliver(interaction_id)
        counts[result] = counts.get(result, 0) + 1
    return counts


def has_pending() -> bool:
    return (
        db.session.scalar(
            select(ConnectionIntentDelivery.interaction_id)
            .where(ConnectionIntentDelivery.delivered_at.is_(None))
            .limit(1)
        )
        is not None
    )
