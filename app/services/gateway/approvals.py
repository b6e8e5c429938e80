"""Answering tool approval cards (`tool_approval` thread interactions): approve or deny.

Only the person the card is addressed to (the run's responsible person when the agent asked) may answer, while
they are an active member of the card's company with write access; another company's card is indistinguishable
from a missing one. Approving re-checks the call's target first: when the connection's managed arguments (e.g.
the Honcho workspace) no longer match what the card showed, or the tool or connection is gone, the card is
invalidated with `approved_tool_target_changed` instead, so a person never approves something other than what
will run.

An approved card lets exactly one identical retry through (the gateway consumes it); see
`app.services.gateway`.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select

from app.catalog.loader import get_app
from app.core.errors import Conflict, Forbidden, ServiceError
from app.extensions import db
from app.models import ConnectionTool, Issue, Membership, ThreadInteraction, ToolConnection
from app.models.base import utcnow
from app.models.trust import TrustScope
from app.services.cards import addressing, lifecycle
from app.services.connections import trust_rules
from app.services.connections.tool_definitions import reviewed_digest
from app.services.gateway import approval_cards, results
from app.services.gateway import arguments as gateway_arguments
from app.services.work import wake_assignee

# How a wake tells the two kinds of invalidation apart.
WAKE_REASONS = {
    results.TARGET_CHANGED: " (its arguments or the connection's configuration changed)",
    results.DEFINITION_CHANGED: " (the provider changed the tool's definition)",
    results.APPROVAL_EXPIRED: " (nobody answered in time; call the tool again to ask anew)",
}
NOT_ADDRESSEE = addressing.APPROVAL_NOT_ADDRESSEE
ALREADY_ANSWERED = "This approval was already answered"


def load_card(company_id: uuid.UUID, interaction_id: uuid.UUID) -> ThreadInteraction:
    card = db.session.get(ThreadInteraction, interaction_id)
    if card is None or card.company_id != company_id or card.kind != approval_cards.KIND:
        raise addressing.not_found(approval_cards.KIND)
    return card


def answer_refusal(membership: Membership | None, card: ThreadInteraction) -> ServiceError | None:
    """Why this person may not answer the card now, or None when they may: the card is a tool approval of their
    company (else it is as good as missing), addressed to them while they have write access, and still pending."""
    if membership is None or card.kind != approval_cards.KIND or membership.company_id != card.company_id:
        return addressing.not_found(approval_cards.KIND)
    if not membership.has_write_access or not addressing.is_addressee(card, membership.user_id):
        return addressing.not_addressee(card)
    if card.status != approval_cards.PENDING:
        return Conflict(ALREADY_ANSWERED)
    return None


def can_answer(membership: Membership | None, card: ThreadInteraction) -> bool:
    """Whether the card offers this person Approve and Deny (`answer_refusal` owns the rule)."""
    return answer_refusal(membership, card) is None


def _check(membership: Membership, card: ThreadInteraction) -> bool:
    """Raise when this person may not answer; False when the card expired meanwhile (it is now `expired`, and
    the agent is woken to read so)."""
    refusal = answer_refusal(membership, card)
    if refusal is not None:
        raise refusal
    if approval_cards.is_expired(card):
        approval_cards.expire_card(card)
        _wake(card, approval_cards.EXPIRED, {"reasonCode": results.APPROVAL_EXPIRED})
        return False
    return True


def _target_change(card: ThreadInteraction) -> str | None:
    """Why the card's call is no longer the one the person would approve, or None: the connection or tool is gone,
    or pins other managed arguments (`approved_tool_target_changed`), or the tool's definition changed or waits
    for review (`tool_definition_changed`)."""
    payload = card.payload or {}
    try:
        connection_id = uuid.UUID(str(payload.get("connectionId")))
    except ValueError:
        return results.TARGET_CHANGED
    connection = db.session.get(ToolConnection, connection_id)
    if connection is None or connection.company_id != card.company_id:
        return results.TARGET_CHANGED
    tool = db.session.scalar(
        select(ConnectionTool).where(
            ConnectionTool.connection_id == connection.id, ConnectionTool.name == payload.get("toolName")
        )
    )
    if tool is not None and (
        tool.status == "quarantined"
        or payload.get("definitionDigest", reviewed_digest(tool)) != reviewed_digest(tool)
    ):
        return results.DEFINITION_CHANGED
    if tool is None or tool.status != "active":
        return results.TARGET_CHANGED
    current = gateway_arguments.managed_arguments(connection, get_app(connection.app_slug), tool.input_schema)
    return None if current == (payload.get("managedArguments") or {}) else results.TARGET_CHANGED


def _resolve(membership: Membership, card: ThreadInteraction, status: str, result: dict) -> None:
    now = utcnow()
    lifecycle.resolve_card(
        card,
        lifecycle.CardStatus(status),
        {**result, "at": now.isoformat()},
        by_user_id=membership.user_id,
        at=now,
    )
    _record(membership, card, status, result)
    _wake(card, status, result)


def _record(membership: Membership, card: ThreadInteraction, status: str, result: dict) -> None:
    lifecycle.record_approval_activity(
        card,
        action=f"tool_approval.{status}",
        actor_type="user",
        actor_id=membership.user_id,
        outcome={key: result[key] for key in ("reasonCode", "trustRuleId") if key in result},
    )


def _wake(card: ThreadInteraction, status: str, result: dict) -> None:
    # The agent is told the answer instead of having to poll: it retries an approved call, or takes another way.
    issue = db.session.get(Issue, card.issue_id)
    if issue is not None:
        tool = (card.payload or {}).get("toolName") or "the tool"
        why = WAKE_REASONS.get(result.get("reasonCode", ""), "")
        wake_assignee(
            issue,
            source="tool_approval",
            reason=f"Your request to call {tool} was answered: {status}{why}.",
            context={
                "approvalId": str(card.id),
                "approvalOutcome": status,
                **({"approvalReason": result["reasonCode"]} if "reasonCode" in result else {}),
            },
        )


def approve(membership: Membership, card: ThreadInteraction) -> ThreadInteraction:
    """Approve one identical call; invalidates the card instead when its target changed since it was asked."""
    if not _check(membership, card):
        return card
    change = _target_change(card)
    if change is not None:
        _resolve(membership, card, approval_cards.INVALIDATED, {"reasonCode": change})
        return card
    _resolve(membership, card, approval_cards.APPROVED, {"outcome": "approved"})
    return card


def always_allow(
    membership: Membership, card: ThreadInteraction, choice: trust_rules.RuleChoice
) -> ThreadInteraction:
    """Approve this call and make a trust rule for the calls like it, in the scope chosen on the card.

    The card itself is approved as by `approve` (its retry runs once, whatever the rule's count); the rule is bound
    to the tool definition the card showed. When the target changed, the card is invalidated and no rule is made.
    """
    choice = choice.validated()
    if not _check(membership, card):
        return card
    if choice.scope == TrustScope.AGENT_CONNECTION and not trust_rules.can_allow_on_every_task(
        membership, card
    ):
        raise Forbidden(trust_rules.EVERY_TASK_FORBIDDEN)
    change = _target_change(card)
    if change is not None:
        _resolve(membership, card, approval_cards.INVALIDATED, {"reasonCode": change})
        return card
    rule = trust_rules.create_rule(membership, card, choice)
    _resolve(membership, card, approval_cards.APPROVED, {"outcome": "approved", "trustRuleId": str(rule.id)})
    return card


def deny(membership: Membership, card: ThreadInteraction) -> ThreadInteraction:
    if not _check(membership, card):
        return card
    _resolve(membership, card, approval_cards.DENIED, {"outcome": "denied"})
    return card
