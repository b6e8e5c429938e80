"""Trust rules: the one owner of "Always allow": made from an approval card, matched by the
gateway, listed and revoked on the connection's page, voided when the tool's definition changes.

A rule matches a call when it is for the same connection, tool and agent, its definition digest is the tool's
reviewed one, it is neither revoked, void nor expired, it has uses left, and (task scope) the call is on its task
and (argument-bound) the call's projected arguments have its digest. Using a rule spends one of its uses with one
conditional UPDATE, so two concurrent calls cannot both spend the last one.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from sqlalchemy import ColumnElement, or_, select, update

from app.core.errors import Forbidden, NotFound, ValidationFailed
from app.extensions import db
from app.models import Membership, ThreadInteraction, ToolConnection, ToolTrustRule, keys
from app.models.base import as_utc, rowcount, utcnow
from app.models.trust import TrustScope
from app.services.access.effective import can_configure
from app.services.activity import record_activity
from app.services.cards import lifecycle

DEFINITION_CHANGED = "tool_definition_changed"
TOOL_REMOVED = "tool_removed"
# Durations a card offers for a rule (seconds); None: until revoked.
EXPIRY_CHOICES = {"1h": 3600, "1d": 86400, "7d": 7 * 86400, "30d": 30 * 86400, "never": None}
MAX_USES = 10_000
EVERY_TASK_FORBIDDEN = (
    "Only someone who can configure this connection can allow a tool on every task; choose this task instead"
)
REVOKE_FORBIDDEN = (
    "Only the person who made this rule or someone who can configure the connection can revoke it"
)


@dataclass(frozen=True)
class RuleChoice:
    """What the person chose on the card for "Always allow"."""

    scope: str  # TrustScope
    only_these_arguments: bool = False
    expires_in: str = "never"  # a key of EXPIRY_CHOICES
    max_uses: int | None = None

    def validated(self) -> RuleChoice:
        errors = []
        if self.scope not in TrustScope.values():
            errors.append(
                {
                    "loc": ["scope"],
                    "msg": "Choose this task or this agent on this connection",
                    "type": "value_error",
                }
            )
        if self.expires_in not in EXPIRY_CHOICES:
            errors.append(
                {"loc": ["expiresIn"], "msg": "Choose an expiry from the list", "type": "value_error"}
            )
        if self.max_uses is not None and not 1 <= self.max_uses <= MAX_USES:
            errors.append(
                {
                    "loc": ["maxUses"],
                    "msg": f"The number of calls is from 1 to {MAX_USES:,}",
                    "type": "value_error",
                }
            )
        if errors:
            raise ValidationFailed(errors)
        return self


def can_allow_on_every_task(membership: Membership, card: ThreadInteraction) -> bool:
    """A rule on every task reaches tasks others are responsible for: only the connection's configurers make one."""
    connection = db.session.get(ToolConnection, uuid.UUID(str((card.payload or {}).get("connectionId"))))
    return (
        connection is not None
        and connection.company_id == card.company_id
        and can_configure(membership, connection)
    )


def create_rule(membership: Membership, card: ThreadInteraction, choice: RuleChoice) -> ToolTrustRule:
    """A rule from an approval card the person may answer (the caller checked), bound to the card's tool definition."""
    choice = choice.validated()
    if choice.scope == TrustScope.AGENT_CONNECTION and not can_allow_on_every_task(membership, card):
        raise Forbidden(EVERY_TASK_FORBIDDEN)
    payload = card.payload or {}
    seconds = EXPIRY_CHOICES[choice.expires_in]
    rule = ToolTrustRule(
        company_id=card.company_id,
        connection_id=uuid.UUID(payload["connectionId"]),
        tool_name=payload["toolName"],
        definition_digest=payload["definitionDigest"],
        agent_id=card.requesting_agent_id,
        scope=choice.scope,
        issue_id=card.issue_id if choice.scope == TrustScope.TASK else None,
        arguments_digest=payload.get("argumentsDigest") if choice.only_these_arguments else None,
        arguments=payload.get("arguments") if choice.only_these_arguments else None,
        expires_at=utcnow() + timedelta(seconds=seconds) if seconds else None,
        remaining_uses=choice.max_uses,
        uses=0,
        created_by_user_id=membership.user_id,
        source_interaction_id=card.id,
    )
    db.session.add(rule)
    db.session.flush()
    record_activity(
        company_id=card.company_id,
        actor_type="user",
        actor_id=membership.user_id,
        action="tool_trust_rule.created",
        entity_type="tool_connection",
        entity_id=rule.connection_id,
        agent_id=card.requesting_agent_id,
        details={
            "trustRuleId": str(rule.id),
            "tool": rule.tool_name,
            "scope": rule.scope,
            "issueId": str(rule.issue_id) if rule.issue_id else None,
            "argumentBound": rule.arguments_digest is not None,
            "expiresAt": rule.expires_at.isoformat() if rule.expires_at else None,
            "maxUses": rule.remaining_uses,
            "definitionDigest": rule.definition_digest,
            "interactionId": str(card.id),
        },
    )
    return rule


def _live() -> list:
    now = utcnow()
    return [
        ToolTrustRule.revoked_at.is_(None),
        ToolTrustRule.voided_at.is_(None),
        or_(ToolTrustRule.expires_at.is_(None), ToolTrustRule.expires_at > now),
        or_(ToolTrustRule.remaining_uses.is_(None), ToolTrustRule.remaining_uses > 0),
    ]


def _matching(
    company_id: uuid.UUID,
    connection_id: uuid.UUID,
    tool_name: str,
    definition_digest: str,
    agent_id: uuid.UUID,
    issue_id: uuid.UUID | None,
    arguments_digest: str,
) -> list:
    """The criteria of a live rule that allows this call (`issue_id` None: a call on no particular task, which
    only every-task rules cover)."""
    task: ColumnElement[bool] = ToolTrustRule.issue_id.is_(None)
    if issue_id is not None:
        task = or_(task, ToolTrustRule.issue_id == issue_id)
    return [
        ToolTrustRule.company_id == company_id,
        ToolTrustRule.connection_id == connection_id,
        ToolTrustRule.tool_name == tool_name,
        ToolTrustRule.agent_id == agent_id,
        ToolTrustRule.definition_digest == definition_digest,
        task,
        or_(ToolTrustRule.arguments_digest.is_(None), ToolTrustRule.arguments_digest == arguments_digest),
        *_live(),
    ]


def matching_rule(
    *,
    company_id: uuid.UUID,
    connection_id: uuid.UUID,
    tool_name: str,
    definition_digest: str,
    agent_id: uuid.UUID,
    arguments_digest: str,
    issue_id: uuid.UUID | None = None,
) -> ToolTrustRule | None:
    """The rule `use_matching_rule` would spend for this call, without spending it (the policy dry run; one
    SELECT)."""
    return db.session.scalars(
        select(ToolTrustRule)
        .where(
            *_matching(
                company_id, connection_id, tool_name, definition_digest, agent_id, issue_id, arguments_digest
            )
        )
        .order_by(ToolTrustRule.remaining_uses.is_(None).desc(), ToolTrustRule.created_at)
        .limit(1)
    ).first()


def use_matching_rule(
    *,
    company_id: uuid.UUID,
    connection_id: uuid.UUID,
    tool_name: str,
    definition_digest: str,
    agent_id: uuid.UUID,
    issue_id: uuid.UUID,
    arguments_digest: str,
) -> uuid.UUID | None:
    """Spend one use of a rule that allows this call and return its id, or None when no rule does (one SELECT,
    and one UPDATE when a rule matches)."""
    candidates = db.session.execute(
        select(ToolTrustRule.id, ToolTrustRule.remaining_uses)
        .where(
            *_matching(
                company_id, connection_id, tool_name, definition_digest, agent_id, issue_id, arguments_digest
            )
        )
        # Unlimited rules first, so counted uses are kept for when nothing else allows the call.
        .order_by(ToolTrustRule.remaining_uses.is_(None).desc(), ToolTrustRule.created_at)
    ).all()
    for rule_id, remaining in candidates:
        if remaining is None:
            db.session.execute(
                update(ToolTrustRule)
                .where(ToolTrustRule.id == rule_id)
                .values(uses=ToolTrustRule.uses + 1)
                .execution_options(synchronize_session=False)
            )
            return rule_id
        spent = db.session.execute(
            update(ToolTrustRule)
            .where(ToolTrustRule.id == rule_id, ToolTrustRule.remaining_uses > 0)
            .values(remaining_uses=ToolTrustRule.remaining_uses - 1, uses=ToolTrustRule.uses + 1)
            .execution_options(synchronize_session=False)
        )
        if rowcount(spent) == 1:
            return rule_id
    return None


def rules_of_connection(connection: ToolConnection) -> list[ToolTrustRule]:
    """Every rule of the connection, newest first (live and ended), for its page."""
    return list(
        db.session.scalars(
            select(ToolTrustRule)
            .where(
                ToolTrustRule.company_id == connection.company_id,
                ToolTrustRule.connection_id == connection.id,
            )
            .order_by(ToolTrustRule.created_at.desc())
            .limit(200)
        ).unique()
    )


def rule_state(rule: ToolTrustRule) -> str:
    """active, revoked, void, expired or used up: what the connection's page says of it."""
    if rule.revoked_at is not None:
        return "revoked"
    if rule.voided_at is not None:
        return "void"
    if rule.expires_at is not None and as_utc(rule.expires_at) <= utcnow():
        return "expired"
    if rule.remaining_uses is not None and rule.remaining_uses <= 0:
        return "used up"
    return "active"


def load_rule(connection: ToolConnection, rule_id: str) -> ToolTrustRule:
    try:
        rule = db.session.get(ToolTrustRule, uuid.UUID(str(rule_id)))
    except ValueError:
        rule = None
    if rule is None or rule.connection_id != connection.id or rule.company_id != connection.company_id:
        raise NotFound("Trust rule not found")
    return rule


def revoke_rule(actor: Membership, connection: ToolConnection, rule: ToolTrustRule) -> ToolTrustRule:
    """End a rule now. Its maker or anyone who can configure the connection may; revoking twice changes nothing."""
    if not actor.has_write_access or (
        rule.created_by_user_id != actor.user_id and not can_configure(actor, connection)
    ):
        raise Forbidden(REVOKE_FORBIDDEN)
    if rule.revoked_at is not None:
        return rule
    rule.revoked_at = utcnow()
    rule.revoked_by_user_id = actor.user_id
    record_activity(
        company_id=rule.company_id,
        actor_type="user",
        actor_id=actor.user_id,
        action="tool_trust_rule.revoked",
        entity_type="tool_connection",
        entity_id=rule.connection_id,
        agent_id=rule.agent_id,
        details={"trustRuleId": str(rule.id), "tool": rule.tool_name},
    )
    return rule


def void_for_tool(connection: ToolConnection, tool_name: str, reason: str) -> int:
    """The tool's definition changed (or the tool is gone): its live rules are void and its open approval cards
    (pending or approved, not yet used) are invalidated with `reason`. Returns how many rules were voided."""
    now = utcnow()
    voided = db.session.execute(
        update(ToolTrustRule)
        .where(
            ToolTrustRule.company_id == connection.company_id,
            ToolTrustRule.connection_id == connection.id,
            ToolTrustRule.tool_name == tool_name,
            ToolTrustRule.revoked_at.is_(None),
            ToolTrustRule.voided_at.is_(None),
        )
        .values(voided_at=now, void_reason=reason, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    cards = db.session.scalars(
        select(ThreadInteraction).where(
            ThreadInteraction.company_id == connection.company_id,
            ThreadInteraction.kind == keys.APPROVAL_CARD,
            ThreadInteraction.status.in_(("pending", "approved")),
        )
    )
    for card in cards:
        payload = card.payload or {}
        if payload.get("connectionId") != str(connection.id) or payload.get("toolName") != tool_name:
            continue
        lifecycle.invalidate_card(card, {"reasonCode": reason, "at": now.isoformat()}, at=now)
        lifecycle.record_approval_activity(
            card,
            action="tool_approval.invalidated",
            actor_type="system",
            actor_id="tool_index",
            outcome={"reasonCode": reason},
        )
    return rowcount(voided)
