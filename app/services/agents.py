"""Agents: creation and their own instructions."""

from __future__ import annotations

import uuid
from typing import NamedTuple

from sqlalchemy import select

from app.core.errors import Unprocessable
from app.extensions import db
from app.models import Agent, Membership
from app.models.agents import AdapterType
from app.services.activity import record_activity

AGENT_INSTRUCTIONS_MAX = 20000


def create_agent(
    company_id: uuid.UUID,
    *,
    name: str,
    title: str = "",
    instructions: str = "",
    adapter_type: str = "manual",
    adapter_config: dict | None = None,
) -> Agent:
    if adapter_type not in AdapterType.values():
        raise Unprocessable("Unknown adapter type")
    agent = Agent(
        company_id=company_id,
        name=name.strip(),
        title=title.strip(),
        instructions=instructions,
        adapter_type=adapter_type,
        adapter_config=adapter_config or {},
    )
    db.session.add(agent)
    db.session.flush()
    return agent


def list_agents(company_id: uuid.UUID) -> list[Agent]:
    return list(db.session.scalars(select(Agent).where(Agent.company_id == company_id).order_by(Agent.name)))


class AgentName(NamedTuple):
    id: uuid.UUID
    name: str


def agent_names(company_id: uuid.UUID) -> list[AgentName]:
    """The company's agents as (id, name) by name: what pickers and audience lists show. A company may have
    hundreds of agents, and loading each as a full row (instructions, adapter settings) cost more than the page."""
    rows = db.session.execute(
        select(Agent.id, Agent.name).where(Agent.company_id == company_id).order_by(Agent.name)
    )
    return [AgentName(*row) for row in rows]


def update_agent_instructions(actor: Membership, agent: Agent, instructions: str) -> Agent:
    text = (instructions or "").strip()
    if len(text) > AGENT_INSTRUCTIONS_MAX:
        raise Unprocessable(f"Instructions are limited to {AGENT_INSTRUCTIONS_MAX:,} characters.")
    if text != agent.instructions:
        agent.instructions = text
        record_activity(
            company_id=agent.company_id,
            actor_type="user",
            actor_id=actor.user_id,
            action="agent.updated",
            entity_type="agent",
            entity_id=agent.id,
            agent_id=agent.id,
            details={"fields": ["instructions"], "length": len(text)},
        )
    return agent
