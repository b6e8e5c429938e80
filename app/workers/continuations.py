"""Continuation delivery: wake the task's assignee exactly once after a connection card is resolved.

Resolving a card (connected or declined), or expiring it because the connection it names was deleted, writes a
`ConnectionIntentDelivery` row in the same transaction. Delivery
leases a due row by moving `next_attempt_at` one minute ahead (`FOR UPDATE SKIP LOCKED` on PostgreSQL, a conditional
update everywhere) and commits the lease; the lease is the retry time, so a crashed worker's row becomes due again.

Then, in a second transaction, it either retires the row without waking (interaction gone or unresolved, task closed
or reassigned, addressee no longer a member with write access), leaves it for a later attempt (the connection is not
ready for the agent yet, or the task is not in progress or in review), or wakes the assignee with the idempotency key
`connection-intent:<interactionId>:<connected|declined|expired>` and marks the row delivered. The key is unique among live
wakes (a database index), so a crash after enqueue, an overlapping lease or a repeated sweep finds the existing wake
and only marks the row delivered.

The worker's sweep does this for a batch: one statement leases up to 50 rows (`UPDATE ... WHERE interaction_id
IN (SELECT ... FOR UPDATE SKIP LOCKED) RETURNING`), and `deliver_leased_batch` decides them all in one
transaction, reading and writing in batches (`request_wakeups`) so a backlog drains at the pace of one row; if
the batch fails it falls back to one row at a time.
"""

from __future__ import annotations

import logging
import uuid
from datetime import timedelta

from sqlalchemy import select, update

from app.core import metrics
from app.extensions import db
from app.models import Agent, ConnectionIntentDelivery, Issue, Membership, ThreadInteraction, keys
from app.models.base import as_utc, utcnow
from app.models.keys import wake_key
from app.services.access.effective import connection_access
from app.services.intents.card import WAKE_STATUSES, card_task_is_active
from app.services.runs.wakeups import (
    WakeAlreadyExists,
    WakeSpec,
    live_wake_for_key,
    request_wakeup,
    request_wakeups,
)

log = logging.getLogger(__name__)

LEASE_SECONDS = 60
SWEEP_LIMIT = 50
KIND = keys.CONNECTION_CARD
# A card's answer (connected, declined), or its expiry when the connection it names was deleted: only that expiry
# writes a delivery row (`intents.expiry.expire_for_deleted_connection`); a close or a change of hands writes none.
OUTCOMES = {"accepted": "connected", "rejected": "declined", "expired": "expired"}

WOKEN = "woken"
ALREADY_WOKEN = "already_woken"
RETIRED = "retired"
RETRY = "retry"
NOT_DUE = "not_due"


def _is_postgres() -> bool:
    return db.session.get_bind().dialect.name == "postgresql"


def claim_due(limit: int = SWEEP_LIMIT, interaction_id: uuid.UUID | None = None) -> list[uuid.UUID]:
    """Lease due rows (all, or just one) in one statement and commit the lease; returns the leased interaction ids.

    On PostgreSQL the rows are picked `FOR UPDATE SKIP LOCKED`, so concurrent workers lease disjoint batches; the
    outer conditions repeat the subquery's, which is what guards backends without row locks.
    """
    now = utcnow()
    due = (
        ConnectionIntentDelivery.delivered_at.is_(None),
        ConnectionIntentDelivery.next_attempt_at <= now,
    )
    pick = (
        select(ConnectionIntentDelivery.interaction_id)
        .where(*due)
        .order_by(ConnectionIntentDelivery.next_attempt_at)
        .limit(limit)
    )
    if interaction_id is not None:
        pick = pick.where(ConnectionIntentDelivery.interaction_id == interaction_id)
    if _is_postgres():
        pick = pick.with_for_update(skip_locked=True)
    claimed = list(
        db.session.scalars(
            update(ConnectionIntentDelivery)
            .where(ConnectionIntentDelivery.interaction_id.in_(pick), *due)
            .values(next_attempt_at=now + timedelta(seconds=LEASE_SECONDS))
            .returning(ConnectionIntentDelivery.interaction_id)
            .execution_options(synchronize_session=False)
        )
    )
    db.session.commit()
    return claimed


def _mark_delivered(interaction_id: uuid.UUID) -> None:
    _delivered([interaction_id])


def _delivered(interaction_ids: list[uuid.UUID]) -> None:
    """Mark the rows delivered (those not already) and observe how long each waited since it was written."""
    now = utcnow()
    written = db.session.scalars(
        update(ConnectionIntentDelivery)
        .where(
            ConnectionIntentDelivery.interaction_id.in_(interaction_ids),
            ConnectionIntentDelivery.delivered_at.is_(None),
        )
        .values(delivered_at=now)
        .returning(ConnectionIntentDelivery.created_at)
        .execution_options(synchronize_session=False)
    ).all()
    for created_at in written:
        metrics.observe_delivery("continuations", (now - as_utc(created_at)).total_seconds())


def _has_write_access(company_id: uuid.UUID, user_id: uuid.UUID | None) -> bool:
    if user_id is None:
        return False
    membership = db.session.scalar(
        select(Membership).where(Membership.company_id == company_id, Membership.user_id == user_id)
    )
    return membership is not None and membership.has_write_access


def _still_wanted(
    delivery: ConnectionIntentDelivery, interaction: ThreadInteraction | None, issue: Issue | None
) -> bool:
    """The row still has a continuation to deliver: a resolved connection card of the row's company whose task is
    in that company and still active for the card (`card_task_is_active`: open, owned by the agent that asked)."""
    return (
        interaction is not None
        and interaction.company_id == delivery.company_id
        and interaction.kind == KIND
        and interaction.status in OUTCOMES
        and issue is not None
        and issue.company_id == delivery.company_id
        and card_task_is_active(interaction, issue)
    )


def _connection_ready(interaction: ThreadInteraction, agent_id: uuid.UUID) -> bool:
    try:
        connection_id = uuid.UUID(str((interaction.result or {}).get("connectionId")))
    except ValueError:
        return False
    access = connection_access(interaction.company_id, agent_id, interaction.addressee_user_id, connection_id)
    return access is not None and access.is_ready


def deliver_leased(interaction_id: uuid.UUID) -> str:
    """Deliver one leased row (see the module docstring); commits. Returns what happened."""
    delivery = db.session.get(ConnectionIntentDelivery, interaction_id)
    if delivery is None or delivery.delivered_at is not None:
        db.session.rollback()
        return ALREADY_WOKEN
    interaction = db.session.get(ThreadInteraction, interaction_id)
    issue = db.session.get(Issue, interaction.issue_id) if interaction is not None else None
    if (
        interaction is None
        or issue is None
        or not _still_wanted(delivery, interaction, issue)
        or not _has_write_access(delivery.company_id, interaction.addressee_user_id)
    ):
        _mark_delivered(interaction_id)
        db.session.commit()
        return RETIRED
    agent = db.session.get(Agent, issue.assignee_agent_id)
    if agent is None:  # the assignee is a foreign key, so this means a broken row: retried like any failure
        raise LookupError(f"The agent {issue.assignee_agent_id} assigned to task {issue.id} was not found")
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
                context=_wake_context(interaction_id, issue, interaction, outcome),
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


def _wake_context(
    interaction_id: uuid.UUID, issue: Issue, interaction: ThreadInteraction, outcome: str
) -> dict:
    return {
        "issueId": str(issue.id),
        "taskId": str(issue.id),
        "interactionId": str(interaction_id),
        "interactionKind": KIND,
        "interactionStatus": interaction.status,
        "outcome": outcome,
        "wakeReason": "connection_intent.resolved",
        "forceFreshSession": True,
    }


def deliver_leased_batch(interaction_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    """Deliver leased rows together: the same decisions as `deliver_leased`, in one transaction, in batches
    (plus a readiness check per connected card). Commits; returns what happened to each.

    When anything goes wrong the batch is rolled back and each row is delivered on its own (`deliver_leased`).
    """
    if not interaction_ids:
        return {}
    try:
        results = _deliver_batch(interaction_ids)
        db.session.commit()
        return results
    except Exception:
        db.session.rollback()
        log.warning("batch delivery failed; delivering one at a time", exc_info=True)
        return {interaction_id: _safe_deliver(interaction_id) for interaction_id in interaction_ids}


def _deliver_batch(interaction_ids: list[uuid.UUID]) -> dict[uuid.UUID, str]:
    rows = db.session.execute(
        select(ConnectionIntentDelivery, ThreadInteraction, Issue)
        .outerjoin(ThreadInteraction, ThreadInteraction.id == ConnectionIntentDelivery.interaction_id)
        .outerjoin(Issue, Issue.id == ThreadInteraction.issue_id)
        .where(ConnectionIntentDelivery.interaction_id.in_(interaction_ids))
    ).all()
    found = {row[0].interaction_id: row for row in rows}
    companies = {row[0].company_id for row in rows}
    addressees = {row[1].addressee_user_id for row in rows if row[1] is not None and row[1].addressee_user_id}
    writers = (
        {
            (m.company_id, m.user_id)
            for m in db.session.scalars(
                select(Membership).where(
                    Membership.company_id.in_(companies), Membership.user_id.in_(addressees)
                )
            )
            if m.has_write_access
        }
        if addressees
        else set()
    )
    assignees = {row[2].assignee_agent_id for row in rows if row[2] is not None and row[2].assignee_agent_id}
    agents = (
        {a.id: a for a in db.session.scalars(select(Agent).where(Agent.id.in_(assignees)))}
        if assignees
        else {}
    )
    results: dict[uuid.UUID, str] = {}
    specs: dict[uuid.UUID, WakeSpec] = {}
    for interaction_id in interaction_ids:
        row = found.get(interaction_id)
        if row is None or row[0].delivered_at is not None:
            results[interaction_id] = ALREADY_WOKEN
            continue
        delivery, interaction, issue = row
        if (
            interaction is None
            or issue is None
            or not _still_wanted(delivery, interaction, issue)
            or (delivery.company_id, interaction.addressee_user_id) not in writers
            or issue.assignee_agent_id not in agents
        ):
            results[interaction_id] = RETIRED
            continue
        agent = agents[issue.assignee_agent_id]
        outcome = OUTCOMES[interaction.status]
        if issue.status not in WAKE_STATUSES or (
            outcome == "connected" and not _connection_ready(interaction, agent.id)
        ):
            results[interaction_id] = RETRY  # the lease stays: tried again when it runs out
            continue
        specs[interaction_id] = WakeSpec(
            agent=agent,
            issue=issue,
            source="automation",
            reason="connection_intent.resolved",
            context=_wake_context(interaction_id, issue, interaction, outcome),
            responsible_user_id=interaction.addressee_user_id,
            idempotency_key=wake_key(interaction_id, outcome),
        )
    woken = request_wakeups(list(specs.values()))
    for interaction_id, spec in specs.items():
        results[interaction_id] = WOKEN if woken.get(spec.idempotency_key) is not None else ALREADY_WOKEN
    done = [i for i, result in results.items() if result != RETRY]
    if done:
        _delivered(done)
    return results


def sweep_pending(limit: int = SWEEP_LIMIT) -> dict[str, int]:
    """Lease and deliver up to `limit` due rows (one batch); returns a count per result."""
    counts: dict[str, int] = {}
    for result in deliver_leased_batch(claim_due(limit)).values():
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
