"""Which pending connection cards a draft connection is bound to (a card's saved audience names its draft).

It lives in `connections` (which `intents` builds on) so that `setup.activate_connection` can ask it too: a draft bound to a card never applies an audience of its own, because the card's completion does.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select

from app.core.errors import Forbidden
from app.extensions import db
from app.models import ThreadInteraction, ToolConnection, keys
from app.services import cards

KIND = keys.CONNECTION_CARD
AUDIENCE_KEY = "audience"
CARD_DRAFT_NOT_YOURS = (
    "This setup answers a connection request addressed to someone else. "
    "Only the person the request asks can finish it."
)


def bound_draft_id(interaction: ThreadInteraction) -> uuid.UUID | None:
    """The draft connection named by a card's saved audience, if any."""
    saved = (interaction.payload or {}).get(AUDIENCE_KEY)
    if not isinstance(saved, dict):
        return None
    try:
        return uuid.UUID(str(saved.get("connectionId")))
    except ValueError:
        return None


def pending_cards_bound_to(connection: ToolConnection) -> list[ThreadInteraction]:
    """Pending cards whose saved setup this connection finishes, oldest first (a handful at most: the cards of the
    person whose draft it is, one per task that asked for its service)."""
    rows = db.session.scalars(
        select(ThreadInteraction)
        .where(
            ThreadInteraction.company_id == connection.company_id,
            ThreadInteraction.kind == KIND,
            ThreadInteraction.status == "pending",
        )
        .order_by(ThreadInteraction.created_at, ThreadInteraction.id)
    )
    return [row for row in rows if bound_draft_id(row) == connection.id]


def require_card_draft_finisher(connection: ToolConnection, user_id: uuid.UUID) -> None:
    """A draft bound to a pending card is finished (signed in, given a key, activated) only by a person the card
    asks: anyone else's credentials would activate it without resolving the card."""
    if connection.status != "draft":
        return
    bound = pending_cards_bound_to(connection)
    if bound and not any(cards.is_addressee(card, user_id) for card in bound):
        raise Forbidden(CARD_DRAFT_NOT_YOURS)
