"""A card's life: opened pending, then closed once (resolved by its addressee, expired, invalidated or superseded).

Every status write of a `ThreadInteraction` goes through here, and so does what a change tells: opening queues the
addressee's mail and the webhooks, every close queues the "resolved" webhooks (`services.notifications`, rows in
the same transaction, so nothing is told of a change that rolls back). The caller decides when a change applies
(its locks and kind-specific rules) and records its own activity.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from datetime import datetime
from enum import StrEnum

from sqlalchemy import update
from sqlalchemy.exc import IntegrityError

from app.extensions import db
from app.models import ThreadInteraction, keys
from app.models.base import rowcount, utcnow
from app.services import notifications
from app.services.activity import record_activity


class CardKind(StrEnum):
    """The kinds a card may be (`ThreadInteraction.kind`)."""

    CONNECTION = keys.CONNECTION_CARD
    APPROVAL = keys.APPROVAL_CARD
    # Kept from before `connection_intent`: read and adopted by the connection rules, never created.
    LEGACY_CONNECTION = "request_confirmation"


class CardStatus(StrEnum):
    """The statuses a card may have. Connection cards: pending -> accepted | rejected | expired (a superseded card
    is `expired` with outcome `superseded`). Approvals: pending -> approved -> consumed; pending -> denied;
    pending or approved -> invalidated | expired."""

    PENDING = "pending"
    ACCEPTED = "accepted"
    REJECTED = "rejected"
    APPROVED = "approved"
    DENIED = "denied"
    CONSUMED = "consumed"
    INVALIDATED = "invalidated"
    EXPIRED = "expired"


def open_card(
    card: ThreadInteraction,
    *,
    winner: Callable[[], ThreadInteraction | None],
    supersedes: Sequence[ThreadInteraction] = (),
) -> ThreadInteraction:
    """Insert `card` pending and tell its addressee; the cards in `supersedes` end as superseded by it. Returns
    `card`, or the pending card another writer inserted under the same idempotency key first.

    The insert runs in a savepoint: the unique index on pending idempotency keys decides between two writers, and
    the loser reads the winner with `winner()` (nothing of `card` was written or told). An insert that fails for
    any other reason (no winner) raises."""
    card.status = CardStatus.PENDING.value
    try:
        with db.session.begin_nested():
            db.session.add(card)
            db.session.flush()
    except IntegrityError:
        found = winner()
        if found is None:
            raise
        return found
    now = utcnow()
    for row in supersedes:
        supersede_card(row, by=card, at=now)
    notifications.card_created(card)
    return card


def resolve_card(
    card: ThreadInteraction, status: CardStatus, result: dict, *, by_user_id: uuid.UUID, at: datetime
) -> None:
    """The addressee answered: the card takes `status` and `result`, with who answered and when. The caller holds
    the card (its checks ran on this row)."""
    card.status = status.value
    card.result = result
    card.resolved_by_user_id = by_user_id
    card.resolved_at = at
    notifications.card_resolved(card)


def resolve_pending_card(
    card: ThreadInteraction, status: CardStatus, result: dict, *, by_user_id: uuid.UUID
) -> bool:
    """Resolve the card once: a conditional UPDATE from `pending`, which also guards backends without row locks.
    False when it was no longer pending (nothing written); otherwise the card is reloaded and told."""
    now = utcnow()
    outcome = db.session.execute(
        update(ThreadInteraction)
        .where(ThreadInteraction.id == card.id, ThreadInteraction.status == CardStatus.PENDING)
        .values(
            status=status.value,
            result=result,
            resolved_by_user_id=by_user_id,
            resolved_at=now,
            updated_at=now,
        )
        .execution_options(synchronize_session=False)
    )
    if rowcount(outcome) != 1:
        return False
    db.session.refresh(card)
    notifications.card_resolved(card)
    return True


def expire_card(card: ThreadInteraction, result: dict, *, at: datetime | None = None) -> None:
    """Nobody can answer the card any more (it waited too long, its task closed or changed hands, what it names
    is gone): it ends `expired` with `result`."""
    _close(card, CardStatus.EXPIRED, result, at or utcnow())


def invalidate_card(card: ThreadInteraction, result: dict, *, at: datetime | None = None) -> None:
    """What the card asked about changed under it (an approval's tool or target): it ends `invalidated`."""
    _close(card, CardStatus.INVALIDATED, result, at or utcnow())


def supersede_card(
    card: ThreadInteraction,
    *,
    by: ThreadInteraction | None,
    reason: str | None = None,
    at: datetime | None = None,
) -> None:
    """Another card asks the same (`by`), or the person it asks no longer should (`reason`): it ends `expired`
    with outcome `superseded`."""
    result: dict = {
        "version": 1,
        "outcome": "superseded",
        "supersededByInteractionId": str(by.id) if by is not None else None,
    }
    if reason is not None:
        result["reason"] = reason
    _close(card, CardStatus.EXPIRED, result, at or utcnow())


def consume_card(card: ThreadInteraction) -> bool:
    """Move an approved card to `consumed` atomically (its one retry is used); False when another call used it
    first. Nobody is told: the approval was told when it was answered."""
    outcome = db.session.execute(
        update(ThreadInteraction)
        .where(ThreadInteraction.id == card.id, ThreadInteraction.status == CardStatus.APPROVED)
        .values(status=CardStatus.CONSUMED.value, updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    db.session.expire(card)
    return rowcount(outcome) == 1


def _close(card: ThreadInteraction, status: CardStatus, result: dict, at: datetime) -> None:
    # An answered card closed later (an approval expiring or invalidated before its retry) keeps when it was
    # answered; a pending one closes now.
    if card.status != CardStatus.APPROVED or card.resolved_at is None:
        card.resolved_at = at
    card.status = status.value
    card.result = result
    notifications.card_resolved(card)


def record_approval_activity(
    card: ThreadInteraction, *, action: str, actor_type: str, actor_id: str | uuid.UUID, outcome: dict
) -> None:
    """The activity line of an approval card's outcome (`tool_approval.<status>`): which card, connection and tool,
    then the outcome's own fields (`reasonCode`, `trustRuleId`)."""
    payload = card.payload or {}
    record_activity(
        company_id=card.company_id,
        actor_type=actor_type,
        actor_id=actor_id,
        action=action,
        entity_type="issue",
        entity_id=card.issue_id,
        agent_id=card.requesting_agent_id,
        run_id=card.source_run_id,
        details={
            "interactionId": str(card.id),
            "interactionKind": keys.APPROVAL_CARD,
            "connectionId": payload.get("connectionId"),
            "tool": payload.get("toolName"),
            **outcome,
        },
    )
