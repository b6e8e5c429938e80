"""URL-mode elicitation: a gateway call that needs the responsible person points the agent's client at the card.

When a call reaches a connection that only the responsible person can repair (its OAuth sign-in has to be done again,
or it is marked as needing attention) and the agent's client declared URL-mode elicitation, the gateway opens the
connection card for that service in the task thread, exactly as `connection_request` would (one pending card per run,
person and service; `runtime.request.request_connection`), and answers with the card's page as a URL elicitation
(2025-11-25 `URLElicitationRequiredError`, 2026-07-28 `input_required`). The card stays the main path: the person
finds it in the thread and the Inbox, and answering it wakes the agent as usual. The URL names no secret (the card's
id), and its page serves only the card's addressee, signed in.

An assistant's call that asks first (a person's own MCP client signed in as their agent, `services.assistants`) is
answered the same way once its approval card exists: the card waits in the person's Inbox as for any agent, and a
client that declared URL-mode elicitation is also pointed at it, since the person is at that client. An agent that
Switchboard runs has nobody at its client, so its approval refusal stays the tool result it always was.

What a 2025-11-25 client declared at `initialize` travels in its own session id (`app.web.agents.sessions`), never
per run, so clients sharing a run token are each served by their own capabilities; a 2026-07-28 request says it
itself.
"""

from __future__ import annotations

import uuid

from app.core.errors import ServiceError
from app.extensions import db
from app.models import HeartbeatRun, ThreadInteraction, ToolConnection
from app.services.access.effective import effective_access
from app.services.access.rows import connection_is_healthy
from app.services.assistants.grants import INVOCATION_SOURCE as ASSISTANT_RUNS
from app.services.gateway.names import possible_slugs, slug_of_name
from app.services.gateway.results import APPROVAL_REQUIRED, PreparedCall
from app.services.intents import service as intents_service
from app.services.runtime import request as runtime_request
from app.services.runtime.context import RunContext

MODES = ("form", "url")


def declared_modes(capabilities: object) -> list[str] | None:
    """The elicitation modes in a client's capabilities (None: no elicitation; `{}` means form only)."""
    if not isinstance(capabilities, dict) or not isinstance(capabilities.get("elicitation"), dict):
        return None
    elicitation = capabilities["elicitation"]
    return [mode for mode in MODES if isinstance(elicitation.get(mode), dict)] or ["form"]


def approval_card_for_client(ctx: RunContext, prepared: PreparedCall) -> ThreadInteraction | None:
    """The pending approval card an assistant's call is waiting for, to show at its client; None for any other call
    or caller."""
    # The decision first: a call that ran has committed, and reading the run again would cost a statement.
    if prepared.decision != APPROVAL_REQUIRED or prepared.approval_id is None:
        return None
    if ctx.run.invocation_source != ASSISTANT_RUNS:
        return None
    return db.session.get(ThreadInteraction, prepared.approval_id)


def connection_needing_person(run: HeartbeatRun, tool_name: str, budget: int) -> ToolConnection | None:
    """The agent's connection a tool name (named within `budget`) points at when it is not callable because it
    needs attention."""
    prefix = slug_of_name(tool_name)
    for access in effective_access(run.company_id, run.agent_id, run.responsible_user_id, with_tools=False):
        connection = access.connection
        if prefix in possible_slugs(connection, budget) and not connection_is_healthy(connection):
            return connection
    return None


def open_card(ctx: RunContext, connection: ToolConnection) -> ThreadInteraction | None:
    """The pending connection card asking the responsible person to repair `connection`'s service (created or
    reused by the `connection_request` rules), or None when those rules send no card (declined in this
    continuation, denied by an administrator, ready after all)."""
    slug = intents_service.service_slug_of(connection)
    try:
        answer = runtime_request.request_connection(ctx, slug)
    except ServiceError:
        db.session.rollback()  # nothing of this attempt is kept; the call's own answer stands
        return None
    if answer.get("state") != "needs_user_action" or not answer.get("interactionId"):
        return None
    return db.session.get(ThreadInteraction, uuid.UUID(answer["interactionId"]))
