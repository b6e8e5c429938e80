"""Whether a service is ready for this run, from the one access service."""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass

from app.models import HeartbeatRun
from app.services.access.effective import effective_access
from app.services.access.rows import ConnectionAccess, connection_is_healthy
from app.services.intents import service as intents_service
from app.services.runtime.context import RunContext

# --- readiness -----------------------------------------------------------------------------------------------


@dataclass
class Readiness:
    state: str
    reason: str
    connection_id: uuid.UUID | None = None
    admin_denied: bool = False


def readiness(
    service: intents_service.ServiceIdentity, accesses: list[ConnectionAccess], matching: list
) -> Readiness:
    """The agent-relative state of one service; the first rule that holds decides:

    1. `ready`: one of the agent's connections of the service is ready (`ConnectionAccess.is_ready`);
    2. `unavailable` (admin denied): the agent's connections of the service have tools, and every one is blocked;
    3. `unavailable`: the service is disabled or has no way to connect;
    4. `needs_user_action`: the company has a connection of the service (not archived) that this agent cannot use
       yet: it needs attention, or an identity or an install for this agent;
    5. `available`: nothing is connected yet.

    `matching` holds the service's live connections (anything with a `health_status`: rows or models).
    """
    ready = next((a for a in accesses if a.is_ready), None)
    if ready is not None:
        return Readiness("ready", "Connection is installed and usable by this agent", ready.connection.id)
    if accesses and not any(a.has_usable_tools for a in accesses) and any(a.has_tools for a in accesses):
        return Readiness(
            "unavailable",
            "An administrator has not permitted executable tools for this agent; reconnecting cannot grant "
            "that permission",
            admin_denied=True,
        )
    if not service.available or not service.methods:
        return Readiness("unavailable", "Connection is disabled or unavailable")
    if matching:
        attention = not all(connection_is_healthy(c) for c in matching)
        return Readiness(
            "needs_user_action",
            "Connection needs attention" if attention else "Review identity and access for this agent",
        )
    return Readiness("available", "Connect this service to continue")


def readiness_for_run(run: HeartbeatRun, slug: str) -> Readiness:
    """`readiness` of one service for a run's agent and responsible person, read now (a continuation rechecks what
    its card promised when it starts). A service this audience can no longer see is unavailable."""
    service = intents_service.resolve_service(run.company_id, slug, run.responsible_user_id, run.agent_id)
    if service is None:
        return Readiness("unavailable", "Connection is disabled or unavailable")
    matching = intents_service.matching_connections(run.company_id, service.slug)
    accesses = (
        effective_access(
            run.company_id,
            run.agent_id,
            run.responsible_user_id,
            connection_ids=[c.id for c in matching],
            with_tools=False,
        )
        if matching
        else []
    )
    return readiness(service, accesses, matching)


def _accesses_by_service(
    ctx: RunContext, connection_ids: list[uuid.UUID]
) -> dict[str, list[ConnectionAccess]]:
    """Effective access for just the given connections (those of the services being answered), by service."""
    grouped: dict[str, list[ConnectionAccess]] = defaultdict(list)
    if not connection_ids:
        return grouped
    for access in effective_access(
        ctx.run.company_id,
        ctx.agent.id,
        ctx.responsible_user_id,
        connection_ids=connection_ids,
        with_tools=False,
        responsible_membership=ctx.membership,
    ):
        grouped[intents_service.service_slug_of(access.connection)].append(access)
    return grouped
