"""A policy dry run: what would happen if an agent called a tool with these arguments, without calling anyone.

The answer comes from the parts a real call uses: the explainer's checks for the agent, the connection and the tool
(`access.explain`, the same checks the gateway's listing and call resolution decide with), the tool's action
(its policy within the access card's scope), the managed arguments the connection pins (`arguments.managed_arguments`)
applied over the caller's (`project_arguments`), and the digest an approval would be bound to
(`canonical_digest` of the projected arguments, as `approval_cards` stores it). An ask-first call that a live trust
rule covers (`trust_rules.matching_rule`: the rule the gateway would spend, bound to the tool's reviewed definition
and, when argument-bound, these projected arguments) would run at once, and the answer names the rule; a dry run is
on no particular task, so only every-task rules count. A tool whose definition changed and waits for review is
`quarantined`. Nothing is written, no card is opened, no rule use is spent, and the provider is never contacted.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from app.catalog.loader import get_app
from app.models import Agent, ToolConnection, ToolTrustRule
from app.services.access.explain import Explanation, explain_access
from app.services.connections.tool_definitions import reviewed_digest
from app.services.connections.trust_rules import matching_rule
from app.services.gateway.arguments import (
    canonical_digest,
    managed_arguments,
    project_arguments,
    redact_arguments,
)

DryRunDecision = Literal["allowed", "allowed_by_rule", "ask_first", "blocked", "quarantined", "unavailable"]
DECISION_TEXT = {
    "allowed": "The call would run at once.",
    "allowed_by_rule": "The call would run at once without asking:",
    "quarantined": "The call would be refused: the tool changed at the provider and waits for review.",
    "ask_first": "The call would wait for the task's responsible person to approve it (one approval, bound to "
    "these projected arguments).",
    "blocked": "The call would be refused: the tool is blocked for this agent.",
    "unavailable": "The call would not reach the tool.",
}


@dataclass(frozen=True)
class DryRun:
    decision: DryRunDecision
    explanation: Explanation
    # The arguments the provider would receive (secret-marked values redacted), the managed ones the connection
    # set, and the digest of the unredacted projection (what an approval of this call is bound to).
    arguments: dict[str, Any]
    managed_argument_names: list[str]
    arguments_digest: str | None
    # The trust rule that would let an ask-first call through (`allowed_by_rule`).
    trust_rule: ToolTrustRule | None = None

    @property
    def message(self) -> str:
        text = DECISION_TEXT[self.decision]
        failure = self.explanation.first_failure
        if self.trust_rule is not None:
            return f"{text} {rule_words(self.trust_rule)}."
        if failure is not None and self.decision in ("unavailable", "quarantined"):
            return f"{text} {failure.message}"
        return text


def rule_words(rule: ToolTrustRule) -> str:
    """Which rule allows the call, as the connection's Trust rules section lists it."""
    who = rule.created_by.name if rule.created_by is not None else "someone"
    words = [
        f"allowed by trust rule {rule.id} (made by {who} at {rule.created_at.strftime('%Y-%m-%d %H:%M')} UTC"
    ]
    if rule.arguments_digest is not None:
        words.append("only these arguments")
    if rule.remaining_uses is not None:
        words.append(f"{rule.remaining_uses} {'call' if rule.remaining_uses == 1 else 'calls'} left")
    if rule.expires_at is not None:
        words.append(f"until {rule.expires_at.strftime('%Y-%m-%d %H:%M')} UTC")
    return ", ".join(words) + ")"


def dry_run_call(
    agent: Agent,
    responsible_user_id: uuid.UUID | None,
    connection: ToolConnection,
    tool_name: str,
    arguments: dict[str, Any],
) -> DryRun:
    """What a call of `tool_name` on `connection` by `agent` (on a run `responsible_user_id` is responsible for)
    would do with `arguments`: allowed, ask first, blocked, or not reaching the tool (the explainer says why)."""
    explanation = explain_access(agent, responsible_user_id, connection, tool_name)
    tool = explanation.tool_access
    if tool is None:
        failure = explanation.first_failure
        quarantined = failure is not None and failure.check == "quarantine"
        return DryRun("quarantined" if quarantined else "unavailable", explanation, {}, [], None)
    managed = managed_arguments(connection, get_app(connection.app_slug), tool.tool.input_schema)
    projected = project_arguments(arguments, managed)
    digest = canonical_digest(projected)
    decision: DryRunDecision
    rule = None
    if explanation.ready and tool.action != "allow":
        rule = matching_rule(
            company_id=connection.company_id,
            connection_id=connection.id,
            tool_name=tool.tool.name,
            definition_digest=reviewed_digest(tool.tool),
            agent_id=agent.id,
            arguments_digest=digest,
        )
    if explanation.ready:
        decision = "allowed" if tool.action == "allow" else "allowed_by_rule" if rule else "ask_first"
    elif explanation.first_failure is not None and explanation.first_failure.reason == "blocked":
        decision = "blocked"
    else:
        decision = "unavailable"
    return DryRun(
        decision,
        explanation,
        redact_arguments(projected, tool.tool.input_schema),
        sorted(managed),
        digest,
        rule,
    )
