"""Who a connection serves (company, members, agents) and the installs that carry it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from functools import cached_property

from sqlalchemy import delete, select

from app.core.errors import Forbidden, ValidationFailed
from app.extensions import db
from app.models import (
    Agent,
    ConnectionInstall,
    Membership,
    ToolConnection,
)
from app.services.access import scopes
from app.services.access.effective import can_manage_connections


@dataclass(frozen=True)
class Audience:
    all_agents: bool
    agent_ids: tuple[uuid.UUID, ...] = ()

    def to_json(self) -> dict:
        return {"allAgents": self.all_agents, "agentIds": [str(a) for a in self.agent_ids]}

    @cached_property
    def agent_id_texts(self) -> frozenset[str]:
        """The chosen agents' ids as text, computed once: pickers ask for each of the company's agents."""
        return frozenset(str(a) for a in self.agent_ids)


def audience_of(connection: ToolConnection) -> Audience:
    if connection.status == "draft":
        draft = connection.config.get("draftAudience") or {"allAgents": True, "agentIds": []}
        return Audience(draft.get("allAgents", True), tuple(uuid.UUID(a) for a in draft.get("agentIds", [])))
    installs = db.session.scalars(
        select(ConnectionInstall).where(ConnectionInstall.connection_id == connection.id)
    )
    all_agents = False
    agent_ids = []
    for install in installs:
        if install.target_type == "company":
            all_agents = True
        else:
            agent_ids.append(install.target_id)
    return Audience(all_agents, tuple(sorted(agent_ids)))


def agents_outside(company_id: uuid.UUID, audience: Audience) -> list[uuid.UUID]:
    """The audience's agents that are not agents of the company (never were, or left it): an audience names only
    the company's own agents (one statement, none without named agents)."""
    if not audience.agent_ids:
        return []
    found = set(
        db.session.scalars(
            select(Agent.id).where(Agent.company_id == company_id, Agent.id.in_(audience.agent_ids))
        )
    )
    return [a for a in audience.agent_ids if a not in found]


def _check_audience(actor: Membership, audience: Audience) -> None:
    if agents_outside(actor.company_id, audience):
        raise ValidationFailed(
            [
                {
                    "loc": ["audience", "agentIds"],
                    "msg": "Choose agents of this company",
                    "type": "value_error",
                }
            ]
        )


WIDEN_FORBIDDEN = "Only connection managers can widen which agents use this connection"


def set_audience(
    actor: Membership, connection: ToolConnection, audience: Audience, *, first_activation: bool = False
) -> None:
    """Apply the audience as installs in the same transaction; narrowing removes the matching installs.

    Broadening a live connection's audience needs connection-management authority, for personal connections as for
    organization ones (the card dialog's rule). `first_activation`: the setup's own audience, chosen when the draft
    was made, is applied as the connection goes live.
    """
    _check_audience(actor, audience)
    if connection.status == "draft":
        connection.config = {**connection.config, "draftAudience": audience.to_json()}
        return
    current = audience_of(connection)
    broadening = (audience.all_agents and not current.all_agents) or bool(
        set(audience.agent_ids) - set(current.agent_ids)
    )
    if broadening and not first_activation and not can_manage_connections(actor):
        raise Forbidden(WIDEN_FORBIDDEN)
    if audience.all_agents and not current.all_agents:
        add_company_install(connection, actor.user_id)
    elif not audience.all_agents and current.all_agents:
        db.session.execute(
            delete(ConnectionInstall).where(
                ConnectionInstall.connection_id == connection.id, ConnectionInstall.target_type == "company"
            )
        )
    keep = set(audience.agent_ids)
    removed = [a for a in current.agent_ids if a not in keep]
    if removed:
        db.session.execute(
            delete(ConnectionInstall).where(
                ConnectionInstall.connection_id == connection.id,
                ConnectionInstall.target_type == "agent",
                ConnectionInstall.target_id.in_(removed),
            )
        )
    for agent_id in keep - set(current.agent_ids):
        add_agent_install(connection, agent_id, actor.user_id)
    db.session.flush()


def _add_install(
    connection: ToolConnection,
    target_type: str,
    target_id: uuid.UUID,
    created_by_user_id: uuid.UUID | None,
    tool_scope: dict[str, str] | None = None,
) -> None:
    db.session.add(
        ConnectionInstall(
            company_id=connection.company_id,
            connection_id=connection.id,
            target_type=target_type,
            target_id=target_id,
            tool_scope=dict(tool_scope) if tool_scope is not None else None,
            created_by_user_id=created_by_user_id,
        )
    )


def add_company_install(connection: ToolConnection, created_by_user_id: uuid.UUID | None) -> None:
    """Install the connection for every agent of the company (additive: an existing install is kept)."""
    exists = db.session.scalar(
        select(ConnectionInstall.id).where(
            ConnectionInstall.connection_id == connection.id, ConnectionInstall.target_type == "company"
        )
    )
    if exists is None:
        _add_install(connection, "company", connection.company_id, created_by_user_id)


def add_agent_install(
    connection: ToolConnection,
    agent_id: uuid.UUID,
    created_by_user_id: uuid.UUID | None,
    *,
    tool_scope: dict[str, str] | None = None,
) -> None:
    """Install the connection for one agent (additive: an existing install is kept as it is).

    With `tool_scope` (an access card's tools) the install covers only those tools; a scoped install that exists
    gains them, and an unscoped one stays unscoped (it covers every tool already).
    """
    install = db.session.scalar(
        select(ConnectionInstall).where(
            ConnectionInstall.connection_id == connection.id,
            ConnectionInstall.target_type == "agent",
            ConnectionInstall.target_id == agent_id,
        )
    )
    if install is None:
        _add_install(connection, "agent", agent_id, created_by_user_id, tool_scope)
    elif install.tool_scope is not None:
        install.tool_scope = (
            scopes.merged_scope(install.tool_scope, tool_scope) if tool_scope is not None else None
        )
