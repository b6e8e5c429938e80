"""A policy dry run: what would happen if an agent called a tool with these arguments, without calling anyone.

The answer comes from the parts a real call uses: the explainer's checks for the agent, the connection and the tool
(`access.explain`, the same checks the gateway's listing and call resolution decide with), the tool's action
(its policy within the access card's scope), the managed arguments the connection pins (`arguments.managed_arguments`)
applied over the caller's (`project_arguments`), and the digest an approval would be bound to
(`canonical_digest` of the projected arguments, as `approval_cards` stores it). Nothing is written, no card is
opened, and the provider is never contacted.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, Literal

from app.catalog.loader import get_app
from app.models import Agent, ToolConnection
from app.services.access.explain import Explanation, explain_access
from app.services.gateway.arguments import (
    canonical_digest,
    managed_arguments,
    project_arguments,
    redact_arguments,
)

DryRunDecision = Literal["allowed", "ask_first", "blocked", "unavailable"]
DECISION_TEXT = {
    "allowed": "The call would run at once.",
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

    @property
    def message(self) -> str:
        text = DECISION_TEXT[self.decision]
        failure = self.explanation.first_failure
        if failure is not None and self.decision == "unavailable":
            return f"{text} {failure.message}"
        return text


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
        return DryRun("unavailable", explanation, {}, [], None)
    managed = managed_arguments(connection, get_app(connection.app_slug), tool.tool.input_schema)
    projected = project_arguments(arguments, managed)
    decision: DryRunDecision
    if explanation.ready:
        decision = "allowed" if tool.action == "allow" else "ask_first"
    elif explanation.first_failure is not None and explanation.first_failure.reason == "blocked":
        decision = "blocked"
    else:
        decision = "unavailable"
    return DryRun(
        decision,
        explanation,
        redact_arguments(projected, tool.tool.input_schema),
        sorted(managed),
        canonical_digest(projected),
    )
