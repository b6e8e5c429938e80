"""Ask-first approval cards the gateway opens, finds, invalidates and consumes (one approved retry), after the
person's "Always allow" rules (`connections.trust_rules`), which let a call through without a card.

A card binds the run, agent, connection, tool, the tool's definition digest and the projected arguments' digest;
its approver is the card's `resolved_by_user_id`. An approved card whose tool definition or arguments no longer
match is invalidated, never used."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import TYPE_CHECKING

from flask import current_app
from sqlalchemy import select

from app.extensions import db
from app.models import ThreadInteraction, keys
from app.models.base import as_utc, utcnow
from app.services.cards import lifecycle
from app.services.connections import trust_rules
from app.services.gateway.arguments import canonical_digest, redact_arguments
from app.services.gateway.results import (
    ALLOWED_BY_RULE,
    APPROVAL_DENIED,
    APPROVAL_EXPIRED,
    APPROVAL_REQUIRED,
    DEFINITION_CHANGED,
    TARGET_CHANGED,
    PreparedCall,
    _refusal,
)
from app.services.gateway.tools import CallTarget

if TYPE_CHECKING:
    from app.services.runtime.context import RunContext
from app.services.intents.creation import record_card_created

KIND = keys.APPROVAL_CARD

# Card statuses: pending -> approved -> consumed; pending -> denied; pending/approved -> invalidated or expired
# (`services.cards.lifecycle` writes them).
PENDING, APPROVED, DENIED, CONSUMED, INVALIDATED = "pending", "approved", "denied", "consumed", "invalidated"
EXPIRED = "expired"


def is_expired(card: ThreadInteraction) -> bool:
    """A pending card unanswered, or an approved call not retried, for `TOOL_APPROVAL_TTL_SECONDS`."""
    since = card.resolved_at if card.status == APPROVED else card.created_at
    ttl = timedelta(seconds=int(current_app.config.get("TOOL_APPROVAL_TTL_SECONDS", 86400)))
    return card.status in (PENDING, APPROVED) and since is not None and as_utc(since) + ttl <= utcnow()


def expire_card(card: ThreadInteraction) -> None:
    """The card waited too long: it ends as `expired` (its own outcome in the card, the webhook and activity)."""
    lifecycle.expire_card(card, {"reasonCode": APPROVAL_EXPIRED, "at": utcnow().isoformat()})
    lifecycle.record_approval_activity(
        card,
        action="tool_approval.expired",
        actor_type="system",
        actor_id="tool_approval",
        outcome={"reasonCode": APPROVAL_EXPIRED},
    )


def _call_key(agent_id: uuid.UUID, tool: CallTarget, projected: dict) -> str:
    """What makes two calls "the same" for approvals: agent, connection, tool, caller-controlled arguments."""
    unmanaged = {k: v for k, v in projected.items() if k not in tool.managed}
    digest = canonical_digest(
        {
            "agent": str(agent_id),
            "connection": str(tool.connection_id),
            "tool": tool.tool_name,
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
    """The call the card asked about changed (`reason_code` says how): it can no longer be approved or retried."""
    lifecycle.invalidate_card(card, {"reasonCode": reason_code, "at": utcnow().isoformat()})


def _create_card(ctx: RunContext, tool: CallTarget, key: str, projected: dict) -> ThreadInteraction:
    title = f"Approve {tool.tool_name} on {tool.connection_name}?"[:300]
    card = ThreadInteraction(
        company_id=ctx.run.company_id,
        issue_id=ctx.issue.id,
        kind=KIND,
        title=title,
        summary=f"{ctx.agent.name} wants to call {tool.tool_name} on {tool.connection_name}.",
        payload={
            "version": 1,
            "connectionId": str(tool.connection_id),
            "connectionName": tool.connection_name,
            "toolName": tool.tool_name,
            "visibleToolName": tool.name,
            "isWrite": tool.is_write,
            "arguments": redact_arguments(projected, tool.input_schema),
            "managedArguments": dict(tool.managed),
            "argumentsDigest": canonical_digest(projected),
            "definitionDigest": tool.definition_digest,
            "runId": str(ctx.run.id),
            "requestingAgentId": str(ctx.agent.id),
            "requestingAgentName": ctx.agent.name,
        },
        idempotency_key=key,
        addressee_user_id=ctx.responsible_user_id,
        requesting_agent_id=ctx.agent.id,
        source_run_id=ctx.run.id,
    )
    opened = lifecycle.open_card(
        card,
        # Another call inserted the same pending key first: the database decided, so use its row.
        winner=lambda: next(
            (c for c in _cards(ctx.issue.id, ctx.run.company_id, key) if c.status == PENDING), None
        ),
    )
    if opened is not card:
        return opened
    record_card_created(
        company_id=ctx.run.company_id,
        agent_id=ctx.agent.id,
        issue_id=ctx.issue.id,
        run_id=ctx.run.id,
        interaction_id=card.id,
        kind=KIND,
        purpose="tool_approval",
    )
    return card


def _approval_step(ctx: RunContext, tool: CallTarget, projected: dict, prepared: PreparedCall) -> None:
    """Ask-first policy: consume a matching approval, else use a trust rule that covers the call, else point at (or
    create) the one pending card."""
    digest = canonical_digest(projected)
    key = _call_key(ctx.agent.id, tool, projected)
    cards = _cards(ctx.issue.id, ctx.run.company_id, key)
    for card in (c for c in cards if c.status == APPROVED):
        prepared.approval_id = card.id
        if is_expired(card):
            expire_card(card)
            prepared.decision = APPROVAL_EXPIRED
            prepared.result = _refusal(
                APPROVAL_EXPIRED,
                f"The approval of this call of {tool.name} expired before it was retried, so it was not run. Call "
                "the tool again to ask for a new approval.",
                approvalId=str(card.id),
            )
            return
        if (card.payload or {}).get("definitionDigest", tool.definition_digest) != tool.definition_digest:
            invalidate_card(card, DEFINITION_CHANGED)
            prepared.decision = DEFINITION_CHANGED
            prepared.result = _refusal(
                DEFINITION_CHANGED,
                f"The provider changed {tool.name} since this call was approved, so it was not run. Call the tool "
                "again to ask for a new approval of the current definition.",
                approvalId=str(card.id),
            )
            return
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
        if lifecycle.consume_card(card):
            prepared.decision = "approved"
            return
    # No approved card for this very call: a person's "Always allow" may cover it (one SELECT).
    prepared.approval_id = None
    rule_id = trust_rules.use_matching_rule(
        company_id=ctx.run.company_id,
        connection_id=tool.connection_id,
        tool_name=tool.tool_name,
        definition_digest=tool.definition_digest,
        agent_id=ctx.agent.id,
        issue_id=ctx.issue.id,
        arguments_digest=digest,
    )
    if rule_id is not None:
        prepared.decision = ALLOWED_BY_RULE
        prepared.trust_rule_id = rule_id
        return
    pending = next((c for c in cards if c.status == PENDING), None)
    if pending is not None and is_expired(pending):
        expire_card(pending)
        db.session.flush()
        pending = None
    if pending is not None and (
        (pending.payload or {}).get("argumentsDigest") != digest
        or pending.addressee_user_id != ctx.responsible_user_id
        or (pending.payload or {}).get("definitionDigest", tool.definition_digest) != tool.definition_digest
    ):
        changed = (pending.payload or {}).get(
            "definitionDigest", tool.definition_digest
        ) != tool.definition_digest
        invalidate_card(pending, DEFINITION_CHANGED if changed else TARGET_CHANGED)
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
