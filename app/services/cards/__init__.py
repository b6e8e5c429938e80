"""The card: a `ThreadInteraction` in a task thread, addressed to one person, of every kind.

This package owns the card's life and who may answer it. `lifecycle` opens, resolves, expires, invalidates and
supersedes a card, and each change tells the card's notifications from here (queued in the same transaction, so
they leave only if it commits). `addressing` holds who may answer (the addressed person) and the errors a card's
door answers with.

What is specific to one kind stays beside its feature, calling this package: the connection card's rules
(phases, audience, continuation, OAuth states) in `services/intents/`, the tool approval's (ask-first key, target
checks, one approved retry) in `services/gateway/`. "Card" is the UI's word, "intent" the connection rule's.
"""

from __future__ import annotations

from app.services.cards.addressing import (
    APPROVAL_NOT_FOUND,
    CONNECTION_NOT_FOUND,
    assert_may_answer,
    is_addressee,
    not_addressee,
    not_found,
)
from app.services.cards.lifecycle import (
    CardKind,
    CardStatus,
    consume_card,
    expire_card,
    invalidate_card,
    open_card,
    resolve_card,
    resolve_pending_card,
    supersede_card,
)

__all__ = [
    "APPROVAL_NOT_FOUND",
    "CONNECTION_NOT_FOUND",
    "CardKind",
    "CardStatus",
    "assert_may_answer",
    "consume_card",
    "expire_card",
    "invalidate_card",
    "is_addressee",
    "not_addressee",
    "not_found",
    "open_card",
    "resolve_card",
    "resolve_pending_card",
    "supersede_card",
]
