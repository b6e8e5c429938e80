"""Who may answer a card, and the errors a card's door answers with, spelled once for every kind.

A card is answered only by the person it is addressed to (`addressee_user_id`); each feature adds what else its
answer needs (write access, an active task). A card of another kind or company reads as missing (404).
"""

from __future__ import annotations

import uuid

from app.core.errors import Forbidden, NotFound
from app.models import ThreadInteraction, keys

CONNECTION_NOT_FOUND = "Connection intent not found"
APPROVAL_NOT_FOUND = "Approval not found"
CONNECTION_NOT_ADDRESSEE = "Only the addressed user can act on this connection request"
APPROVAL_NOT_ADDRESSEE = "Only the person this approval is addressed to can answer it"


def is_addressee(card: ThreadInteraction, user_id: uuid.UUID | None) -> bool:
    """Whether `user_id` is the person the card asks (a card addressed to nobody is nobody's to answer)."""
    return user_id is not None and card.addressee_user_id == user_id


def not_addressee(card: ThreadInteraction) -> Forbidden:
    """The 403 for someone other than the addressee, in the words of the card's kind."""
    return Forbidden(APPROVAL_NOT_ADDRESSEE if card.kind == keys.APPROVAL_CARD else CONNECTION_NOT_ADDRESSEE)


def assert_may_answer(card: ThreadInteraction, user_id: uuid.UUID | None) -> None:
    """Raise 403 unless `user_id` is the card's addressee."""
    if not is_addressee(card, user_id):
        raise not_addressee(card)


def not_found(kind: str) -> NotFound:
    """The 404 for a card of `kind` that is missing, of another company, or of another kind."""
    return NotFound(APPROVAL_NOT_FOUND if kind == keys.APPROVAL_CARD else CONNECTION_NOT_FOUND)
