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
from app.core.errors import Conflict, Forbidden, NotFound, ServiceError
from app.extensions import db
from app.models import ConnectionTool, Issue, Membership, ThreadInteraction, ToolConnection
from app.models.base import utcnow
from app.services import notifications  # notifications: issue 15
from app.services.activity import record_activity
from app.services.gateway import approval_cards, results
from app.services.gateway import arguments as gateway_arguments
from app.services.work import wake_assignee

NOT_ADDRESSEE = "Only the person this approval is addressed to can answer it"
ALREADY_ANSWERED = "This approval was already answered"


def load_card(company_id: uuid.UUID, interaction_id: uuid.UUID) -> ThreadInteraction:
    card = db.session.get(ThreadInteraction, interaction_id)
    if card is None or card.company_id != company_id or card.kind != approval_cards.KIND:
        raise NotFound("Approval not found")
    return card


def answer_refusal(membership: Membership | None, card: ThreadInteraction) -> ServiceError | None:
    """Why this person may not answer the card now, or None when they may: the card is a tool approval of their
    company (else it is as good as missing), addressed to them while they have write access, and still pending."""
    if membership is None or card.kind != approval_cards.KIND or membership.company_id != card.company_id:
        return NotFound("Approval not found")
    if not membership.has_write_access or card.addressee_user_id != membership.user_id:
        return Forbidden(NOT_ADDRESSEE)
    if card.status != approval_cards.PENDING:
        return Conflict(ALREADY_ANSWERED)
    return None


def can_answer(membership: Membership | None, card: ThreadInteraction) -> bool:
    """Whether the card offers this person Approve and Deny (`answer_refusal` owns the rule)."""
    return answer_refusal(membership, card) is None


def _check(membership: Membership, card: ThreadInteraction) -> None:
    refusal = answer_refusal(membership, card)
    if refusal is not None:
        raise refusal


def _target_unchanged(card: ThreadInteraction) -> bool:
    """The connection and tool still exist and pin the same managed arguments as when the card was made."""
    payload = card.payload or {}
    try:
        connection_id = uuid.UUID(str(payload.get("connectionId")))
    except ValueError:
        return False
    connection = db.session.get(ToolConnection, connection_id)
    if connection is None or connection.company_id != card.company_id:
        return False
    tool = db.session.scalar(
        select(ConnectionTool).where(
            ConnectionTool.connection_id == connection.id, ConnectionTool.name == payload.get("toolName")
        )
    )
    if tool is None or tool.status != "active":
        return False
    current = gateway_arguments.managed_arguments(connection, get_app(connection.app_slug), tool.input_schema)
    return current == (payload.get("managedArguments") or {})


def _resolve(membership: Membership, card: ThreadInteraction, status: str, result: dict) -> None:
    now = utcnow()
    card.status = status
    card.result = {**result, "at": now.isoformat()}
    card.resolved_by_user_id = membership.user_id
    card.resolved_at = now
    notifications.card_resolved(card)  # notifications: issue 15
    record_activity(
        company_id=card.company_id,
        actor_type="user",
        actor_id=membership.user_id,
        action=f"tool_approval.{status}",
        entity_type="issue",
        entity_id=card.issue_id,
        agent_id=card.requesting_agent_id,
        run_id=card.source_run_id,
        details={
            "interactionId": str(card.id),
            "interactionKind": approval_cards.KIND,
            "connectionId": (card.payload or {}).get("connectionId"),
            "tool": (card.payload or {}).get("toolName"),
            **({"reasonCode": result["reasonCode"]} if "reasonCode" in result else {}),
        },
    )
    # The agent is told the answer instead of having to poll: it retries an approved call, or takes another way.
    issue = db.session.get(Issue, card.issue_id)
    if issue is not None:
        tool = (card.payload or {}).get("toolName") or "the tool"
        wake_assignee(
            issue,
            source="tool_approval",
            reason=f"Your request to call {tool} was answered: {status}.",
            context={"approvalId": str(card.id), "approvalOutcome": status},
        )


def approve(membership: Membership, card: ThreadInteraction) -> ThreadInteraction:
    """Approve one identical call; invalidates the card instead when its target changed since it was asked."""
    _check(membership, card)
    if not _target_unchanged(card):
        _resolve(membership, card, approval_cards.INVALIDATED, {"reasonCode": results.TARGET_CHANGED})
        return card
    _resolve(membership, card, approval_cards.APPROVED, {"outcome": "approved"})
    return card


def deny(membership: Membership, card: ThreadInteraction) -> ThreadInteraction:
    _check(membership, card)
    _resolve(membership, card, approval_cards.DENIED, {"outcome": "denied"})
    return card
