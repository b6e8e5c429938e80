"""The card's owner (`services.cards.lifecycle`): every status a card takes is written there, each change queues
its notifications in the same transaction, a pending key is decided by the database, and a card resolves once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from app.models import NotificationDelivery, ThreadInteraction, WebhookEndpoint, keys
from app.models.base import as_utc, utcnow
from app.services.cards import CardStatus, lifecycle
from app.services.secrets_box import encrypt
from tests.factories import Factory

EVENTS = [
    "connection_intent.created",
    "connection_intent.resolved",
    "tool_approval.requested",
    "tool_approval.resolved",
]


@pytest.fixture
def team(make, db):
    company, owner, agent, issue = make.team("Acme", "ACME")
    db.session.add(
        WebhookEndpoint(
            company_id=company.id,
            url="https://hooks.example.test/cards",
            events=EVENTS,
            secret_ciphertext=encrypt("webhook-secret"),
        )
    )
    db.session.commit()
    return company, owner, agent, issue


def approval(team, key: str = "tool-approval:one") -> ThreadInteraction:
    company, owner, agent, issue = team
    return ThreadInteraction(
        company_id=company.id,
        issue_id=issue.id,
        kind=keys.APPROVAL_CARD,
        title="Approve search on Notion?",
        payload={"version": 1, "toolName": "search", "requestingAgentName": agent.name},
        idempotency_key=key,
        addressee_user_id=owner.id,
        requesting_agent_id=agent.id,
    )


def told(db, card) -> list[str]:
    """The webhook events queued about `card`, by name."""
    db.session.flush()
    rows = db.session.scalars(select(NotificationDelivery).where(NotificationDelivery.channel == "webhook"))
    return sorted(row.event for row in rows if row.payload["data"]["interactionId"] == str(card.id))


def fresh(db, card) -> ThreadInteraction:
    db.session.expire_all()
    return db.session.get(ThreadInteraction, card.id)


def test_opening_inserts_a_pending_card_and_tells_it_once(db, team):
    card = approval(team)
    assert lifecycle.open_card(card, winner=lambda: None) is card
    db.session.commit()
    assert fresh(db, card).status == CardStatus.PENDING
    assert told(db, card) == ["tool_approval.requested"]


def test_a_second_pending_card_under_one_key_yields_the_first_and_tells_nothing(db, team):
    first = approval(team)
    lifecycle.open_card(first, winner=lambda: None)
    db.session.commit()
    second = approval(team)
    assert (
        lifecycle.open_card(second, winner=lambda: db.session.get(ThreadInteraction, first.id)) is not second
    )
    db.session.commit()
    assert db.session.scalar(select(ThreadInteraction).where(ThreadInteraction.id == second.id)) is None
    assert told(db, first) == ["tool_approval.requested"]


def test_an_insert_failing_without_a_winner_raises(db, team):
    from sqlalchemy.exc import IntegrityError

    lifecycle.open_card(approval(team), winner=lambda: None)
    with pytest.raises(IntegrityError):
        lifecycle.open_card(approval(team), winner=lambda: None)
    db.session.rollback()


def test_opening_supersedes_the_cards_it_replaces(db, team):
    old = approval(team, "tool-approval:old")
    lifecycle.open_card(old, winner=lambda: None)
    new = approval(team, "tool-approval:new")
    lifecycle.open_card(new, winner=lambda: None, supersedes=[old])
    db.session.commit()
    old = fresh(db, old)
    assert old.status == CardStatus.EXPIRED and old.resolved_at is not None
    assert old.result == {"version": 1, "outcome": "superseded", "supersededByInteractionId": str(new.id)}
    assert told(db, old) == ["tool_approval.requested", "tool_approval.resolved"]


def test_a_connection_card_resolves_once(db, team):
    _company, owner, agent, issue = team
    card = Factory(db).card(issue, agent, owner, "notion")
    result = {"version": 1, "outcome": "declined", "reason": None}
    assert lifecycle.resolve_pending_card(card, CardStatus.REJECTED, result, by_user_id=owner.id)
    assert (card.status, card.result, card.resolved_by_user_id) == ("rejected", result, owner.id)
    accepted = {"version": 1, "outcome": "connected"}
    assert not lifecycle.resolve_pending_card(card, CardStatus.ACCEPTED, accepted, by_user_id=owner.id)
    db.session.commit()
    assert fresh(db, card).status == "rejected"
    assert told(db, card) == ["connection_intent.created", "connection_intent.resolved"]


def test_an_answer_records_who_and_when(db, team):
    _company, owner, _agent, _issue = team
    card = approval(team)
    lifecycle.open_card(card, winner=lambda: None)
    now = utcnow()
    lifecycle.resolve_card(card, CardStatus.DENIED, {"outcome": "denied"}, by_user_id=owner.id, at=now)
    db.session.commit()
    card = fresh(db, card)
    assert (card.status, card.resolved_by_user_id, as_utc(card.resolved_at)) == (
        "denied",
        owner.id,
        as_utc(now),
    )
    assert told(db, card) == ["tool_approval.requested", "tool_approval.resolved"]


def test_closing_an_approved_card_keeps_when_it_was_approved(db, team):
    _company, owner, _agent, _issue = team
    approved, waiting = approval(team, "tool-approval:a"), approval(team, "tool-approval:b")
    for card in (approved, waiting):
        lifecycle.open_card(card, winner=lambda: None)
    answered_at = utcnow() - timedelta(hours=1)
    lifecycle.resolve_card(approved, CardStatus.APPROVED, {}, by_user_id=owner.id, at=answered_at)
    now = utcnow()
    lifecycle.expire_card(approved, {"reasonCode": "approval_expired"}, at=now)
    lifecycle.invalidate_card(waiting, {"reasonCode": "approved_tool_target_changed"}, at=now)
    db.session.commit()
    approved, waiting = fresh(db, approved), fresh(db, waiting)
    assert (approved.status, as_utc(approved.resolved_at)) == ("expired", as_utc(answered_at))
    assert (waiting.status, as_utc(waiting.resolved_at)) == ("invalidated", as_utc(now))
    assert waiting.result == {"reasonCode": "approved_tool_target_changed"}


def test_a_superseded_card_without_a_successor_says_why(db, team):
    card = approval(team)
    lifecycle.open_card(card, winner=lambda: None)
    lifecycle.supersede_card(card, by=None, reason="The responsible person changed")
    db.session.commit()
    assert fresh(db, card).result == {
        "version": 1,
        "outcome": "superseded",
        "supersededByInteractionId": None,
        "reason": "The responsible person changed",
    }


def test_an_approved_card_is_consumed_once_and_nobody_is_told(db, team):
    _company, owner, _agent, _issue = team
    card = approval(team)
    lifecycle.open_card(card, winner=lambda: None)
    assert not lifecycle.consume_card(card)  # pending: nothing to consume
    lifecycle.resolve_card(card, CardStatus.APPROVED, {}, by_user_id=owner.id, at=utcnow())
    db.session.flush()
    assert lifecycle.consume_card(card)
    assert not lifecycle.consume_card(card)
    db.session.commit()
    assert fresh(db, card).status == CardStatus.CONSUMED
    assert told(db, card) == ["tool_approval.requested", "tool_approval.resolved"]


def test_a_change_that_rolls_back_tells_nobody(db, team):
    card = approval(team)
    lifecycle.open_card(card, winner=lambda: None)
    db.session.rollback()
    assert db.session.scalars(select(NotificationDelivery)).all() == []


def test_the_statuses_written_are_the_closed_set():
    assert {status.value for status in CardStatus} == {
        "pending",
        "accepted",
        "rejected",
        "approved",
        "denied",
        "consumed",
        "invalidated",
        "expired",
    }
