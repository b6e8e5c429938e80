"""A run's gateway decision timeline: every decision the gateway made for the run, in order.

Read from the append-only activity log, where each decision is already one row written on the path that made it
(so the timeline costs the gateway no statement of its own): `tool_gateway.list` (the run listed its tools),
`tool_gateway.call` (a call: allowed by policy, by an approval or by a trust rule, asked, or refused, with the
provider's result status and the latency), `tool_gateway.resource_read`, and the person's answers to the run's
approval cards (`tool_approval.<outcome>`, with who answered). Arguments and results are never shown, only their
canonical digests (`arguments.canonical_digest`). Two statements: the rows (by the run index), and the names of
the people who answered.
"""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from sqlalchemy import or_, select

from app.core.raw_json import RawJSON
from app.extensions import db
from app.models import ActivityLog, HeartbeatRun, User
from app.models.base import as_utc
from app.services.activity import record_activity
from app.services.gateway import limits
from app.services.gateway import results as reasons

LISTED = "tool_gateway.list"
CALLED = "tool_gateway.call"
RESOURCE_READ = "tool_gateway.resource_read"
APPROVAL_PREFIX = "tool_approval."
TIMELINE_LIMIT = 2000  # the first decisions of a very long run; `truncated` says when there are more

# What a call's decision says, as the timeline shows it.
CALL_DECISIONS = {
    "allowed": "Allowed by policy",
    "approved": "Allowed by an approval",
    "trusted": "Allowed by a trust rule",
    reasons.APPROVAL_REQUIRED: "Asked for approval",
    reasons.APPROVAL_DENIED: "Refused: the approval was denied",
    reasons.TARGET_CHANGED: "Refused: the approved call changed",
    reasons.TOOL_BLOCKED: "Refused: blocked by policy",
    limits.RATE_LIMITED: "Refused by a rate limit",
    limits.LOOP_DETECTED: "Refused by the loop breaker",
    "unknown_tool": "Refused: no such tool",
    "quarantined": "Refused: the tool is quarantined",
    # Issue 28's trust outcomes (a trust rule's call is named by its rule in `_call_summary`).
    reasons.ALLOWED_BY_RULE: "Allowed by a trust rule",
    reasons.APPROVAL_EXPIRED: "Refused: the approval expired",
    reasons.DEFINITION_CHANGED: "Refused: the tool's definition changed since the approval",
    reasons.READ_ONLY_ASSISTANT: "Refused: the assistant is connected read-only",
}
# What an approval card's end says when nobody answered it (its reason code, or the outcome alone).
APPROVAL_ENDS = {
    ("invalidated", reasons.DEFINITION_CHANGED): "Invalidated: the tool's definition changed",
    ("invalidated", reasons.TARGET_CHANGED): "Invalidated: the approved call changed",
    ("invalidated", None): "Invalidated",
    ("expired", reasons.APPROVAL_EXPIRED): "Expired: nobody answered in time",
    ("expired", None): "Expired: nobody answered in time",
}


@dataclass(frozen=True)
class Decision:
    """One entry of the timeline (plain values; `kind` is listed, called, resource_read or approval)."""

    sequence: int
    at: datetime
    kind: str
    decision: str
    summary: str
    tool: str | None = None
    connection_id: str | None = None
    connection_name: str | None = None
    outcome: str | None = None
    latency_ms: int | None = None
    arguments_digest: str | None = None
    result_digest: str | None = None
    listing_digest: str | None = None
    approval_id: str | None = None
    trust_rule_id: str | None = None
    retry_after_seconds: int | None = None
    by_user_id: str | None = None
    by: str | None = None


@dataclass(frozen=True)
class Timeline:
    run_id: uuid.UUID
    decisions: list[Decision]
    truncated: bool


def _call_summary(details: dict) -> tuple[str, str]:
    decision = str(details.get("decision") or "allowed")
    rule = details.get("trustRuleId")
    if decision == "allowed" and rule:
        decision = "trusted"
    if decision in ("trusted", reasons.ALLOWED_BY_RULE) and rule:
        return decision, f"Allowed by trust rule {str(rule)[:8]}"
    return decision, CALL_DECISIONS.get(decision, decision.replace("_", " ").capitalize())


def _entry(sequence: int, row: ActivityLog, names: dict[str, str]) -> Decision:
    details = row.details or {}
    common: dict[str, Any] = {
        "sequence": sequence,
        "at": as_utc(row.created_at),
        "connection_id": details.get("connectionId"),
        "connection_name": details.get("connectionName"),
    }
    if row.action == LISTED:
        return Decision(
            kind="listed",
            decision="listed",
            summary="Listed its tools",
            listing_digest=details.get("listingDigest"),
            **common,
        )
    if row.action.startswith(APPROVAL_PREFIX):
        outcome = row.action.removeprefix(APPROVAL_PREFIX)
        by = names.get(row.actor_id) if row.actor_type == "user" else None
        reason = details.get("reasonCode")
        ended = APPROVAL_ENDS.get((outcome, reason)) or APPROVAL_ENDS.get((outcome, None))
        summary = f"{outcome.capitalize()} by {by or 'Switchboard'}" + (f" ({reason})" if reason else "")
        if ended is not None:
            summary = ended + (f" ({by})" if by else "")
        if outcome == "approved" and details.get("trustRuleId"):
            summary += f", and made trust rule {str(details['trustRuleId'])[:8]}"
        return Decision(
            kind="approval",
            decision=outcome,
            summary=summary,
            trust_rule_id=details.get("trustRuleId"),
            tool=details.get("tool"),
            approval_id=details.get("interactionId"),
            by_user_id=row.actor_id if row.actor_type == "user" else None,
            by=by,
            **common,
        )
    decision, summary = _call_summary(details)
    retry_after = details.get("retryAfterSeconds")
    return Decision(
        kind="resource_read" if row.action == RESOURCE_READ else "called",
        decision=decision,
        summary="Read a resource" if row.action == RESOURCE_READ else summary,
        tool=details.get("tool") or details.get("uri"),
        outcome=details.get("outcome"),
        latency_ms=details.get("durationMs"),
        arguments_digest=details.get("argumentsDigest"),
        result_digest=details.get("resultDigest"),
        approval_id=details.get("approvalId"),
        trust_rule_id=details.get("trustRuleId"),
        retry_after_seconds=retry_after if isinstance(retry_after, int) else None,
        **common,
    )


def run_timeline(run: HeartbeatRun) -> Timeline:
    """The run's gateway decisions in the order they were made (the caller has checked the run's company)."""
    rows = list(
        db.session.scalars(
            select(ActivityLog)
            .where(
                ActivityLog.run_id == run.id,
                ActivityLog.company_id == run.company_id,
                or_(
                    ActivityLog.action.in_((LISTED, CALLED, RESOURCE_READ)),
                    ActivityLog.action.startswith(APPROVAL_PREFIX),
                ),
            )
            .order_by(ActivityLog.created_at, ActivityLog.id)
            .limit(TIMELINE_LIMIT + 1)
        )
    )
    truncated = len(rows) > TIMELINE_LIMIT
    rows = rows[:TIMELINE_LIMIT]
    user_ids = {
        uuid.UUID(r.actor_id) for r in rows if r.actor_type == "user" and r.action.startswith(APPROVAL_PREFIX)
    }
    names = (
        {
            str(user.id): user.name or user.email
            for user in db.session.scalars(select(User).where(User.id.in_(user_ids)))
        }
        if user_ids
        else {}
    )
    return Timeline(run.id, [_entry(n, row, names) for n, row in enumerate(rows, 1)], truncated)


@lru_cache(maxsize=64)
def _listing_digest(text: str) -> str:
    # Kept per listing text: a cached listing is the same string object, whose hash Python keeps.
    return hashlib.sha256(text.encode()).hexdigest()


def record_listed(run: HeartbeatRun, listing: RawJSON) -> None:
    """The run listed its tools: one activity row, with the digest of the listing it was given."""
    record_activity(
        company_id=run.company_id,
        actor_type="agent",
        actor_id=run.agent_id,
        action=LISTED,
        entity_type="heartbeat_run",
        entity_id=run.id,
        agent_id=run.agent_id,
        run_id=run.id,
        details={"runId": str(run.id), "listingDigest": _listing_digest(listing.text)},
    )
