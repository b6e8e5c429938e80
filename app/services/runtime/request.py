"""`connection_request`: reuse a usable connection or open a connection card for the responsible person."""

from __future__ import annotations

import uuid

from sqlalchemy import false, or_, select

from app.catalog.loader import get_app_versions
from app.core.errors import Conflict, Forbidden, NotFound, Unprocessable
from app.extensions import db
from app.models import (
    Issue,
    ThreadInteraction,
    ToolConnection,
)
from app.models.keys import access_request_digest, card_key, repaired_card_id
from app.services.access.effective import connection_access
from app.services.access.eligible import eligible_access
from app.services.intents import access_requests, creation
from app.services.intents import card as intents_card
from app.services.intents import service as intents_service
from app.services.runtime import lookup
from app.services.runtime.context import RunContext, _uuid
from app.services.runtime.readiness import _accesses_by_service, readiness

DECLINED_IN_CONTINUATION = (
    "The user declined this connection. Pursue alternatives; do not request it again in this continuation."
)
# The instruction of a request that sent a card, as the contract (connection-intents-api.md) words it.
CARD_SENT = "A connection card was sent to the responsible user. End this run and wait for continuation."
CARD_SENT_FOR_REPAIR = (
    "The connection your earlier request ({card}) gave is not usable any more, so a new connection card asks the "
    "responsible user to repair it. End this run and wait for continuation."
)
ADMIN_DENIAL = (
    "This agent has no permitted actions for this service. Ask an administrator to review tool permissions; "
    "reconnecting will not remove a denial."
)


# --- request -------------------------------------------------------------------------------------------------


def _continued_run_ids(ctx: RunContext) -> set[uuid.UUID]:
    """This run, and the run whose card woke it (a continuation carries the card's `interactionId`)."""
    run_ids = {ctx.run.id}
    interaction_id = _uuid((ctx.run.context_snapshot or {}).get("interactionId"))
    if interaction_id is not None:
        source_run_id = db.session.scalar(
            select(ThreadInteraction.source_run_id).where(
                ThreadInteraction.id == interaction_id,
                ThreadInteraction.company_id == ctx.run.company_id,
                ThreadInteraction.kind == intents_card.KIND,
            )
        )
        if source_run_id is not None:
            run_ids.add(source_run_id)
    return run_ids


def _declined_in_this_continuation(ctx: RunContext, slug: str) -> bool:
    """True when this service's card was declined for this run, for the run this continuation continues, or is
    the declined card that woke this run.

    Called with the task row locked (`_lock_task`): a decline locks the task before the card, so a decline racing
    this request either committed before this read or waits until the request's card is decided.
    """
    run_ids = _continued_run_ids(ctx)
    interaction_id = _uuid((ctx.run.context_snapshot or {}).get("interactionId"))
    woken_by = ThreadInteraction.id == interaction_id if interaction_id is not None else false()
    declined = db.session.scalars(
        select(ThreadInteraction)
        .where(
            ThreadInteraction.company_id == ctx.run.company_id,
            ThreadInteraction.issue_id == ctx.issue.id,
            ThreadInteraction.kind == intents_card.KIND,
            ThreadInteraction.status == "rejected",
            or_(ThreadInteraction.source_run_id.in_(run_ids), woken_by),
        )
        .execution_options(populate_existing=True)
    )
    return any((row.payload or {}).get("serviceSlug") == slug for row in declined)


def _lock_task(ctx: RunContext) -> None:
    """Lock the run's task row (PostgreSQL; SQLite serializes writers itself), in the order every writer uses."""
    db.session.scalar(select(Issue.id).where(Issue.id == ctx.issue.id).with_for_update())


def request_connection(
    ctx: RunContext,
    slug: str,
    *,
    connection_id: uuid.UUID | None = None,
    tool_names: list[str] | None = None,
) -> dict:
    """Ready when usable now; otherwise create or reuse one pending card addressed to the responsible person.

    Naming a connection or tools makes it an access request: ready when the agent may already use every tool
    asked for, else a card asking to grant exactly those (see `intents.access_requests`).
    """
    if connection_id is None and not tool_names and intents_service.is_catalog_slug(slug):
        return _request_catalog_service(ctx, slug)
    service = intents_service.resolve_service(ctx.run.company_id, slug, ctx.responsible_user_id, ctx.agent.id)
    if service is None or not service.available or not service.methods:
        raise Unprocessable(f"Connection service {slug} is not available")
    matching = intents_service.matching_connections(ctx.run.company_id, service.slug)
    accesses = _accesses_by_service(ctx, [c.id for c in matching]).get(service.slug, [])
    if connection_id is not None or tool_names:
        target = _access_target(ctx, service, matching, accesses, connection_id)
        if target is not None:
            return _request_access(ctx, service, target, tool_names)
    state = readiness(service, accesses, matching)
    if state.state == "ready":
        return _ready(service, state.connection_id)
    if state.admin_denied:
        raise Forbidden(ADMIN_DENIAL)
    return _send_card(ctx, service)


def _request_catalog_service(ctx: RunContext, slug: str) -> dict:
    """`request_connection` for a catalog service, reading only what the answer needs (agents call it often):
    the agent's eligible connections of the app first (plain rows, `eligible_access`, which carry the app's
    catalog version), and only when none is ready the app, its connections and the pending card together
    (`lookup`).

    The same rules in the same order as the general path: an unknown or unavailable service is refused before
    anything else, then `readiness` decides (its first ready connection is the first by id either way).
    """
    accesses = eligible_access(
        ctx.run.company_id,
        ctx.agent.id,
        ctx.responsible_user_id,
        app_slug=slug,
    )
    ready = next((access for access in accesses if access.is_ready), None)
    if ready is not None:
        service = _catalog_service(slug, ready.connection.catalog_version)
        if service is not None and service.available and service.methods:
            return _ready(service, ready.connection.id)
    found = lookup.lookup_catalog_service(ctx, slug)
    service = _catalog_service(slug, found.content_hash)
    if service is None or not service.available or not service.methods:
        raise Unprocessable(f"Connection service {slug} is not available")
    state = readiness(service, accesses, found.matching)
    if state.state == "ready":
        return _ready(service, state.connection_id)
    if state.admin_denied:
        raise Forbidden(ADMIN_DENIAL)
    if found.pending_card_id is not None:
        return _card_sent(service, found.pending_card_id)
    return _open_card(ctx, service)


def _catalog_service(slug: str, content_hash: str | None) -> intents_service.ServiceIdentity | None:
    """`resolve_service` of a catalog slug from the content hash a caller read (`get_app` reads it itself)."""
    if content_hash is None:
        return None
    app_definition = get_app_versions([(slug, content_hash)]).get(slug)
    return intents_service.catalog_service(app_definition) if app_definition is not None else None


def _ready(service: intents_service.ServiceIdentity, connection_id: uuid.UUID | None) -> dict:
    return {
        "version": 1,
        "service": service.slug,
        "state": "ready",
        "connectionId": str(connection_id),
        "interactionId": None,
        "instruction": f"{service.name} is connected and available in this run. Use its installed tools.",
    }


def _send_card(
    ctx: RunContext, service: intents_service.ServiceIdentity, access_request: dict | None = None
) -> dict:
    """The card this run's request for the service waits on: the one already pending under its key (a repeat
    request, answered without the task lock: see `creation.pending_card_id`), else `_open_card`'s."""
    pending_id = creation.pending_card_id(
        ctx.issue,
        card_key(ctx.run.id, ctx.responsible_user_id, service.slug, access_request),
        access_request_digest(access_request),
    )
    if pending_id is not None:
        return _card_sent(service, pending_id)
    return _open_card(ctx, service, access_request)


def _open_card(
    ctx: RunContext, service: intents_service.ServiceIdentity, access_request: dict | None = None
) -> dict:
    """With the task locked and no decline in this continuation, the card `create_connection_intent` creates or
    reuses (it looks for the pending card by its key again, now under the lock)."""
    _lock_task(ctx)
    if _declined_in_this_continuation(ctx, service.slug):
        raise Conflict(DECLINED_IN_CONTINUATION)
    interaction, created = creation.create_connection_intent(
        ctx.issue,
        ctx.agent,
        service,
        addressee_user_id=ctx.responsible_user_id,
        run_id=ctx.run.id,
        access_request=access_request,
    )
    if interaction.status != "pending":
        raise Conflict("This connection request has already been resolved. Follow its recorded outcome.")
    if created:
        creation.record_card_created(
            company_id=ctx.run.company_id,
            agent_id=ctx.agent.id,
            issue_id=ctx.issue.id,
            run_id=ctx.run.id,
            interaction_id=interaction.id,
            kind=intents_card.KIND,
            purpose=None,
        )
    repaired = repaired_card_id(interaction.idempotency_key)
    if repaired is not None:
        return {
            **_card_sent(service, interaction.id),
            "instruction": CARD_SENT_FOR_REPAIR.format(card=repaired),
        }
    return _card_sent(service, interaction.id)


def _card_sent(service: intents_service.ServiceIdentity, interaction_id: uuid.UUID) -> dict:
    return {
        "version": 1,
        "service": service.slug,
        "state": "needs_user_action",
        "connectionId": None,
        "interactionId": str(interaction_id),
        "instruction": CARD_SENT,
    }


# --- access requests -----------------------------------------------------------------------------------------

SEVERAL_CONNECTIONS = (
    "Several {service} connections exist; name one with connectionId (from connections_search)."
)


def _access_target(
    ctx: RunContext,
    service: intents_service.ServiceIdentity,
    matching: list[ToolConnection],
    accesses: list,
    connection_id: uuid.UUID | None,
) -> ToolConnection | None:
    """The existing connection an access request is about; None when the service has none yet (a setup card)."""
    live = [c for c in matching if intents_service.reusable_by(c, ctx.responsible_user_id, ctx.agent.id)]
    if connection_id is not None:
        target = next((c for c in live if c.id == connection_id), None)
        if target is None:
            # Like any object a body names that the caller cannot see: not found.
            raise NotFound(f"Connection {connection_id} does not serve {service.slug} for this run")
        return target
    usable = [a.connection for a in accesses if a.has_identity]
    if len(usable) == 1:
        return usable[0]
    if len(live) == 1:
        return live[0]
    if not live:
        return None
    raise Conflict(SEVERAL_CONNECTIONS.format(service=service.name))  # the state asks for a choice


def _request_access(
    ctx: RunContext,
    service: intents_service.ServiceIdentity,
    target: ToolConnection,
    tool_names: list[str] | None,
) -> dict:
    tools = access_requests.review_tools(target, tool_names)
    current = connection_access(
        ctx.run.company_id,
        ctx.agent.id,
        ctx.responsible_user_id,
        target.id,
        with_tools=True,
        responsible_membership=ctx.membership,
    )
    usable = current.callable_tool_names if current is not None else set()
    if all(t.name in usable for t in tools):
        return {
            "version": 1,
            "service": service.slug,
            "state": "ready",
            "connectionId": str(target.id),
            "interactionId": None,
            "instruction": f"{target.name} is available in this run with the tools asked for.",
        }
    return _send_card(ctx, service, access_requests.access_request_payload(target, tools))
