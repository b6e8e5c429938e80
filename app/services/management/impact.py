"""What deleting or disconnecting a connection touches, read before anything changes.

The confirmation page shows it and the services act on the same lists, so the page never promises something the
delete does not do:

- agents that lose access: the connection's audience (all agents, or the selected ones) while it is set up;
- pending connection cards whose saved setup is this draft (`payload.audience.connectionId`): they keep waiting,
  only their saved setup goes (the person starts the setup again from the card);
- pending connection cards asking for this very connection (`connection:<id>`, custom servers, or an access card
  whose `accessRequest.connectionId` is this connection): they expire, since nothing else can answer them, and their
  agents are told why (`intents.expiry.expire_for_deleted_connection`);
- tool approval requests still waiting on an answer (pending, or approved and not yet used): they block a delete
  (409), because a person owes an agent an answer about a call on this connection.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from sqlalchemy import select

from app.extensions import db
from app.models import Agent, ThreadInteraction, ToolConnection, keys
from app.services.agents import list_agents
from app.services.connections import card_binding
from app.services.connections.audience import audience_of
from app.services.intents.access_requests import ACCESS_REQUEST_KEY

CONNECTION_CARD = card_binding.KIND
TOOL_APPROVAL = keys.APPROVAL_CARD
WAITING_APPROVAL = ("pending", "approved")
CONNECTION_PREFIX = "connection:"


@dataclass
class Impact:
    connection: ToolConnection
    agents: list[Agent] = field(default_factory=list)
    all_agents: bool = False
    kept_cards: list[ThreadInteraction] = field(default_factory=list)
    expiring_cards: list[ThreadInteraction] = field(default_factory=list)
    waiting_approvals: list[ThreadInteraction] = field(default_factory=list)

    @property
    def blocked_reason(self) -> str | None:
        """Why the connection cannot be deleted now (the 409 message), or None."""
        count = len(self.waiting_approvals)
        if not count:
            return None
        noun = "request" if count == 1 else "requests"
        return (
            f"{count} tool approval {noun} for this connection still wait for an answer. "
            "Answer or deny them on their tasks, then delete the connection."
        )


def _service_slug(row: ThreadInteraction) -> str:
    return str((row.payload or {}).get("serviceSlug") or "")


def _access_connection_id(row: ThreadInteraction) -> str | None:
    """The connection an access card asks tools of (`payload.accessRequest.connectionId`), else None."""
    access = (row.payload or {}).get(ACCESS_REQUEST_KEY)
    return str(access.get("connectionId")) if isinstance(access, dict) else None


def connection_impact(connection: ToolConnection) -> Impact:
    """The agents, cards and approvals a delete (or a disconnect) of this connection touches."""
    impact = Impact(connection=connection)
    if connection.status != "draft":
        audience = audience_of(connection)
        agents = list_agents(connection.company_id)
        impact.all_agents = audience.all_agents
        wanted = set(audience.agent_ids)
        impact.agents = agents if audience.all_agents else [a for a in agents if a.id in wanted]
    cards = db.session.scalars(
        select(ThreadInteraction)
        .where(
            ThreadInteraction.company_id == connection.company_id,
            ThreadInteraction.kind.in_((CONNECTION_CARD, TOOL_APPROVAL)),
            ThreadInteraction.status.in_(WAITING_APPROVAL),
        )
        .order_by(ThreadInteraction.created_at)
    )
    own_service = f"{CONNECTION_PREFIX}{connection.id}"
    for card in cards:
        if card.kind == TOOL_APPROVAL:
            if (card.payload or {}).get("connectionId") == str(connection.id):
                impact.waiting_approvals.append(card)
        elif card.status == "pending":
            if _service_slug(card) == own_service or _access_connection_id(card) == str(connection.id):
                impact.expiring_cards.append(card)
            elif card_binding.bound_draft_id(card) == connection.id:
                impact.kept_cards.append(card)
    return impact
