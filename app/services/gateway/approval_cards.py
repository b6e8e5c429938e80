"""Ask-first approval cards the gateway opens, finds, invalidates and consumes (one approved retry)."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from app.extensions import db
from app.models import ThreadInteraction
from app.models.base import rowcount, utcnow
from app.services import notifications  # notifications: issue 15
from app.services.gateway.arguments import canonical_digest, redact_arguments
from app.services.gateway.results import (
    APPROVAL_DENIED,
    APPROVAL_REQUIRED,
    TARGET_CHANGED,
    PreparedCall,
    _refusal,
)
from app.services.gateway.tools import GatewayTool

if TYPE_CHECKING:
    from app.services.runtime.context import RunContext
from app.services.intents.creation import record_card_created

KIND = "tool_approval"

# Card statuses: pending -> approved -> consumed; pending -> denied; pending/approved -> invalidated.
PENDING, APPROVED, DENIED, CONSUMED, INVALIDATED = "pending", "approved", "denied", "consumed", "invalidated"


def _call_key(agent_id: uuid.UUID, tool: GatewayTool, projected: dict) -> str:
    """What makes two calls "the same" for approvals: agent, connection, tool, caller-controlled arguments."""
    unmanaged = {k: v for k, v in projected.items() if k not in tool.managed}
    digest = canonical_digest(
        {
            "agent": str(agent_id),
            "connection": str(tool.connection.id),
            "tool": tool.tool_access.tool.name,
            "arguments": unmanaged,
        }
    )
    return f"tool-approval:{digest}"


def _cards(issue_id: uuid.UUID, company_id: uuid.UUID, key: str) -> list[ThreadInteraction]:
    return list(
        db.session.scalars(
            select(ThreadInteraction)
            .where(
                ThreadInteraction.company_id == company_id,
                ThreadInteraction.issue_id == issue_id,
                ThreadInteraction.kind == KIND,
                ThreadInteraction.idempotency_key == key,
                ThreadInteraction.status.in_((PENDING, APPROVED, DENIED)),
            )
            .order_by(ThreadInteraction.created_at.desc())
        )
    )


def invalidate_card(card: ThreadInteraction, reason_code: str) -> None:
    card.status = INVALIDATED
    card.result = {"reasonCode": reason_code, "at": utcnow().isoformat()}
    card.resolved_at = card.resolved_at or utcnow()
    notifications.card_resolved(card)  # notifications: issue 15


def consume_card(card: ThreadInteraction) -> bool:
    """Atomically move an approved card to consumed; False when another call consumed it first."""
    consumed_at = utcnow()
    outcome = db.session.execute(
        update(ThreadInteraction)
        .where(ThreadInteraction.id == card.id, ThreadInteraction.status == APPROVED)
        .values(status=CONSUMED, updated_at=consumed_at)
        .execution_options(synchronize_session=False)
    )
    db.session.expire(card)
    return rowcount(outcome) == 1


def _create_card(ctx: RunContext, tool: GatewayTool, key: str, projected: dict) -> ThreadInteraction:
    raw_tool = tool.tool_access.tool
    title = f"Approve {raw_tool.name} on {tool.connection.name}?"[:300]
    card = ThreadInteraction(
        company_id=ctx.run.company_id,
        issue_id=ctx.issue.id,
        kind=KIND,
        status=PENDING,
        title=title,
        summary=f"{ctx.agent.name} wants to call {raw_tool.name} on {tool.connection.name}.",
        payload={
            "version": 1,
            "connectionId": str(tool.connection.id),
            "connectionName": tool.connection.name,
            "toolName": raw_tool.name,
            "visibleToolName": tool.name,
            "isWrite": bool(raw_tool.is_write),
            "arguments": redact_arguments(projected, raw_tool.input_schema),
            "managedArguments": dict(tool.managed),
            "argumentsDigest": canonical_digest(projected),
            "requestingAgentId": str(ctx.agent.id),
            "requestingAgentName": ctx.agent.name,
        },
        idempotency_key=key,
        addressee_user_id=ctx.responsible_user_id,
        requesting_agent_id=ctx.agent.id,
        source_run_id=ctx.run.id,
    )
    try:
        with db.session.begin_nested():
            db.session.add(card)
            db.session.flush()
    except IntegrityError:
        # Another call inserted the same pending key first: the database decided, so use its row.
        winner = next((c for c in _cards(ctx.issue.id, ctx.run.company_id, key) if c.status == PENDING), None)
        if winner is None:
            raise
        return winner
    record_card_created(
        company_id=ctx.run.company_id,
        agent_id=ctx.agent.id,
        issue_id=ctx.issue.id,
        run_id=ctx.run.id,
        interaction_id=card.id,
        kind=KIND,
        purpose="tool_approval",
    )
    notifications.card_created(card)  # notifications: issue 15
    return card


def _approval_step(ctx: RunContext, tool: GatewayTool, projected: dict, prepared: PreparedCall) -> None:
    """Ask-first policy: consume a matching approval, or point at (or create) the one pending card."""
    key = _call_key(ctx.agent.id, tool, projected)
    digest = canonical_digest(projected)
    cards = _cards(ctx.issue.id, ctx.run.company_id, key)
    for card in (c for c in cards if c.status == APPROVED):
        prepared.approval_id = card.id
        if (card.payload or {}).get("argumentsDigest") != digest:
            invalidate_card(card, TARGET_CHANGED)
            prepared.decision = TARGET_CHANGED
            prepared.result = _refusal(
                TARGET_CHANGED,
                "The approved call no longer matches this connection's current configuration (for example its "
                "workspace changed), so it was not run. Call the tool again to ask for a new approval.",
                approvalId=str(card.id),
            )
            return
        if consume_card(card):
            prepared.decision = "approved"
            return
    pending = next((c for c in cards if c.status == PENDING), None)
    if pending is not None and (
        (pending.payload or {}).get("argumentsDigest") != digest
        or pending.addressee_user_id != ctx.responsible_user_id
    ):
        invalidate_card(pending, TARGET_CHANGED)
        db.session.flush()
        pending = None
    if pending is None:
        denied = next((c for c in cards if c.status == DENIED and c.source_run_id == ctx.run.id), None)
        if denied is not None and (not cards or cards[0] is denied):
            prepared.decision = APPROVAL_DENIED
            prepared.approval_id = denied.id
            prepared.result = _refusal(
                APPROVAL_DENIED,
                f"The responsible person denied this call of {tool.name}. Do not retry it in this run; "
                "pursue alternatives or explain what you could not do.",
                approvalId=str(denied.id),
            )
            return
        pending = _create_card(ctx, tool, key, projected)
    prepared.decision = APPROVAL_REQUIRED
    prepared.approval_id = pending.id
    prepared.result = _refusal(
        APPROVAL_REQUIRED,
        f"{tool.name} needs approval by the responsible person. An approval card was sent in the task thread "
        f"(approval id {pending.id}). Finish independent work; once it is approved, retry the same call with the "
        "same arguments (it runs once).",
        approvalId=str(pending.id),
    )
