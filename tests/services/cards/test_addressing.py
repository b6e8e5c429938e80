"""Who may answer a card (its addressee, whatever its kind) and the 404/403 a card's door answers with."""

from __future__ import annotations

import pytest

from app.core.errors import Forbidden, NotFound
from app.models import ThreadInteraction, keys
from app.services import cards


@pytest.fixture
def people(make):
    company, owner, _agent, _issue = make.team("Acme", "ACME")
    other = make.member(company, "member")
    return owner, other


@pytest.mark.parametrize(
    ("kind", "forbidden"),
    [
        (keys.CONNECTION_CARD, "Only the addressed user can act on this connection request"),
        ("request_confirmation", "Only the addressed user can act on this connection request"),
        (keys.APPROVAL_CARD, "Only the person this approval is addressed to can answer it"),
    ],
)
def test_only_the_addressee_may_answer(people, kind, forbidden):
    owner, other = people
    card = ThreadInteraction(kind=kind, addressee_user_id=owner.id)
    assert cards.is_addressee(card, owner.id)
    cards.assert_may_answer(card, owner.id)
    assert not cards.is_addressee(card, other.id)
    with pytest.raises(Forbidden) as refused:
        cards.assert_may_answer(card, other.id)
    assert refused.value.message == forbidden


def test_a_card_addressed_to_nobody_is_nobodys_to_answer(people):
    card = ThreadInteraction(kind=keys.CONNECTION_CARD, addressee_user_id=None)
    assert not cards.is_addressee(card, None)
    with pytest.raises(Forbidden):
        cards.assert_may_answer(card, None)


@pytest.mark.parametrize(
    ("kind", "message"),
    [(keys.CONNECTION_CARD, "Connection intent not found"), (keys.APPROVAL_CARD, "Approval not found")],
)
def test_a_missing_card_reads_in_its_kinds_words(kind, message):
    error = cards.not_found(kind)
    assert isinstance(error, NotFound) and error.message == message
