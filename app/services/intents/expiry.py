"""Closing pending cards when their task closes or changes hands, or the connection they name is deleted; answered
cards' continuations when the task is taken up."""

from __future__ import annotations

from sqlalchemy import select, update

from app.core.wake_signal import CONTINUATIONS, signal_work
from app.extensions import db
from app.models import (
    ConnectionIntentDelivery,
    Issue,
    ThreadInteraction,
)
from app.models.base import rowcount, utcnow
from app.services.cards import lifecycle
from app.services.intents.card import (
    ASSIGNMENT_CHANGED,
    CONNECTION_DELETED,
    CONNECTION_KINDS,
    ISSUE_CLOSED,
    RESPONSIBLE_CHANGED,
    WAKE_STATUSES,
    adopted_connection_cards,
    retire_oauth_states,
)

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
        ThreadInteraction.kind.in_(CONNECTION_KINDS),
        ThreadInteraction.status == "pending",
    )
    rows = adopted_connection_cards(list(db.session.scalars(query.with_for_update())))
    if reason == ASSIGNMENT_CHANGED and not issue.is_closed:
        rows = [r for r in rows if r.requesting_agent_id != issue.assignee_agent_id]
    now = utcnow()
    for row in rows:
        if reason == ISSUE_CLOSED:
            lifecycle.expire_card(row, {"version": 1, "outcome": "issue_closed", "reason": None}, at=now)
        else:
            result = {"version": 1, "outcome": "expired", "reason": "The task assignment changed"}
            lifecycle.expire_card(row, result, at=now)
    retire_oauth_states([row.id for row in rows])
    db.session.flush()
    return len(rows)


def supersede_intents_for_responsible_change(issue: Issue) -> int:
    """The task's responsible person changed: pending cards addressed to anyone else are superseded (the next
    request of the agent opens a new card for the new person). Returns how many cards were superseded."""
    rows = adopted_connection_cards(
        list(
            db.session.scalars(
                select(ThreadInteraction)
                .where(
                    ThreadInteraction.issue_id == issue.id,
                    ThreadInteraction.kind.in_(CONNECTION_KINDS),
                    ThreadInteraction.status == "pending",
                )
                .with_for_update()
            )
        )
    )
    rows = [r for r in rows if r.addressee_user_id != issue.responsible_user_id]
    now = utcnow()
    for row in rows:
        lifecycle.supersede_card(row, by=None, reason=RESPONSIBLE_CHANGED, at=now)
    retire_oauth_states([row.id for row in rows])
    db.session.flush()
    return len(rows)


def expire_for_deleted_connection(cards: list[ThreadInteraction]) -> None:
    """The connection these pending cards name (a custom server's service, or an access request's connection) is
    being deleted, so nothing can answer them: each expires with "The connection was deleted", and, unlike a close
    or a change of hands (where the task no longer waits on the agent), its agent is woken once to read why, as
    after an answer (a continuation outbox row; `workers.continuations` wakes with the `expired` outcome).

    The caller holds the cards' row locks and passes only cards still pending.
    """
    if not cards:
        return
    now = utcnow()
    for card in cards:
        lifecycle.expire_card(
            card, {"version": 1, "outcome": "expired", "reason": CONNECTION_DELETED}, at=now
        )
        db.session.add(
            ConnectionIntentDelivery(interaction_id=card.id, company_id=card.company_id, next_attempt_at=now)
        )
    retire_oauth_states([card.id for card in cards])
    db.session.flush()
    signal_work(db.session, CONTINUATIONS)  # NOTIFY at commit: a listening worker delivers the continuations


# --- continuations that waited for the task ----------------------------------------------------------------------


def continue_answered_cards(issue: Issue) -> None:
    """The task moved to a status that is worked on: the continuations of its answered cards that waited for that
    (the card said "once the task is In progress") are due now, and a listening worker is told at commit."""
    if issue.status not in WAKE_STATUSES:
        return
    waiting = db.session.execute(
        update(ConnectionIntentDelivery)
        .where(
            ConnectionIntentDelivery.interaction_id.in_(
                select(ThreadInteraction.id).where(
                    ThreadInteraction.issue_id == issue.id, ThreadInteraction.kind.in_(CONNECTION_KINDS)
                )
            ),
            ConnectionIntentDelivery.delivered_at.is_(None),
        )
        .values(next_attempt_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if rowcount(waiting):
        signal_work(db.session, CONTINUATIONS)
