"""Which pending connection cards a draft connection is bound to (a card's saved audience names its draft).

It lives in `connections` (which `intents` builds on) so that `setup.activate_connection` can ask it too: a draft bound to a card never applies an audience of its own, because the card's completion does.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select

from app.extensions import db
from app.models import ThreadInteraction, ToolConnection, keys

KIND = keys.CONNECTION_CARD
AUDIENCE_KEY = "audience"


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
