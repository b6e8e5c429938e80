"""The audience the addressed person chose for the connection a card resolves with."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from app.core.errors import Conflict, Forbidden
from app.models import (
    Membership,
    ThreadInteraction,
    ToolConnection,
)
from app.services.access.effective import can_manage_connections
from app.services.connections import card_binding
from app.services.connections.audience import Audience, add_agent_install, add_company_install, agents_outside
from app.services.intents.card import AUDIENCE_KEY, BROADEN_FORBIDDEN, _uuid_or_none

# --- the audience the addressed person chose -------------------------------------------------------------------


@dataclass(frozen=True)
class CardAudience:
    """The audience saved on a card, bound to the draft connection whose setup will finish the card."""

    connection_id: uuid.UUID
    audience: Audience

    def to_json(self) -> dict:
        return {"connectionId": str(self.connection_id), **self.audience.to_json()}


def card_audience(interaction: ThreadInteraction) -> CardAudience | None:
    """The saved audience of a card (`payload.audience`), or None when none was saved (requester only)."""
    connection_id = card_binding.bound_draft_id(interaction)
    if connection_id is None:
        return None
    saved = interaction.payload[AUDIENCE_KEY]
    agent_ids = tuple(a for a in (_uuid_or_none(v) for v in saved.get("agentIds") or []) if a is not None)
    return CardAudience(connection_id, Audience(bool(saved.get("allAgents")), agent_ids))


def is_broader_than_requester(audience: Audience, requester_id: uuid.UUID) -> bool:
    return audience.all_agents or any(agent_id != requester_id for agent_id in audience.agent_ids)


def require_sharing_authority(membership: Membership, audience: Audience, requester_id: uuid.UUID) -> None:
    """An audience wider than the requesting agent needs tools:manage_connections, for personal connections as
    for organization ones (checked when the audience is saved and again when the card completes)."""
    if is_broader_than_requester(audience, requester_id) and not can_manage_connections(membership):
        raise Forbidden(BROADEN_FORBIDDEN)


def _apply_card_audience(
    connection: ToolConnection, saved: CardAudience, agent_id: uuid.UUID, user_id: uuid.UUID
) -> None:
    """Install the connection for the saved audience, additively (existing installs are kept)."""
    if saved.audience.all_agents:
        add_company_install(connection, user_id)
    for other in saved.audience.agent_ids:
        if other != agent_id:
            add_agent_install(connection, other, user_id)


def check_audience_agents(company_id: uuid.UUID, audience: Audience) -> None:
    """Agents named in a saved audience that left the company meanwhile refuse the completion
    (`connections.audience.agents_outside` owns the rule; a card answers with a conflict, not a form error)."""
    if agents_outside(company_id, audience):
        raise Conflict("An agent chosen for this connection is no longer part of the company")
