"""Board routes that answer a connection card: setup options, phase, complete, decline.

Only the person the card is addressed to may act (403 for other members); other companies' cards are 404.
"""

from __future__ import annotations

import uuid
from typing import Annotated

from flask import jsonify
from flask.typing import ResponseReturnValue
from flask_login import current_user
from pydantic import StringConstraints

from app.core.errors import Forbidden, NotFound
from app.extensions import db
from app.models import ThreadInteraction
from app.services.intents import card as intents_card
from app.services.intents import resolution
from app.web.api import bp
from app.web.api.validation import StrictBody, parse_body
from app.web.context import membership_for, parse_uuid
from app.web.unit_of_work import after_commit
from app.workers.continuations import deliver as deliver_continuation


class PhaseBody(StrictBody):
    phase: str | None = None


class CompleteBody(StrictBody):
    connectionId: uuid.UUID


class DeclineBody(StrictBody):
    reason: Annotated[str, StringConstraints(max_length=4000)] | None = None


def _addressed_intent(interaction_id: str) -> ThreadInteraction:
    """Load -> company check (404) -> addressee check (403)."""
    interaction = db.session.get(ThreadInteraction, parse_uuid(interaction_id))
    if interaction is None or not intents_card.is_connection_card(interaction):
        raise NotFound("Connection intent not found")
    membership_for(interaction.company_id)
    if interaction.addressee_user_id != current_user.id:
        raise Forbidden(intents_card.NOT_ADDRESSEE)
    return interaction


@bp.get("/connection-intents/<interaction_id>/setup-options")
def intent_setup_options(interaction_id: str) -> ResponseReturnValue:
    interaction = _addressed_intent(interaction_id)
    options = resolution.setup_options(interaction)
    return jsonify({**options, "interaction": resolution.interaction_json(interaction)})


@bp.post("/connection-intents/<interaction_id>/phase")
def intent_phase(interaction_id: str) -> ResponseReturnValue:
    interaction = _addressed_intent(interaction_id)
    body = parse_body(PhaseBody)
    updated = resolution.set_phase(interaction.id, current_user.id, body.phase or "")
    return jsonify(resolution.interaction_json(updated))


@bp.post("/connection-intents/<interaction_id>/complete")
def intent_complete(interaction_id: str) -> ResponseReturnValue:
    interaction = _addressed_intent(interaction_id)
    body = parse_body(CompleteBody)
    resolved = resolution.complete_intent(interaction.id, current_user.id, body.connectionId)
    after_commit(lambda: deliver_continuation(resolved.id))
    return jsonify(resolution.interaction_json(resolved))


@bp.post("/connection-intents/<interaction_id>/decline")
def intent_decline(interaction_id: str) -> ResponseReturnValue:
    interaction = _addressed_intent(interaction_id)
    body = parse_body(DeclineBody)
    resolved = resolution.decline_intent(interaction.id, current_user.id, body.reason)
    after_commit(lambda: deliver_continuation(resolved.id))
    return jsonify(resolution.interaction_json(resolved))
