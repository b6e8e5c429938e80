"""What a call comes to: the prepared call, refusal results and their reason codes."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from app.core.mcp_messages import tool_error

if TYPE_CHECKING:
    from app.services.gateway.tools import CallTarget

APPROVAL_REQUIRED = "approval_required"
APPROVAL_DENIED = "approval_denied"
TARGET_CHANGED = "approved_tool_target_changed"
# The tool's definition changed since the approval (issue 28): the same words as `trust_rules.DEFINITION_CHANGED`.
DEFINITION_CHANGED = "tool_definition_changed"
ALLOWED_BY_RULE = "allowed_by_trust_rule"
APPROVAL_EXPIRED = "approval_expired"
TOOL_BLOCKED = "tool_blocked"
READ_ONLY_ASSISTANT = "read_only_assistant"  # a write tool called by an assistant connected read-only
PROVIDER_ERROR = "provider_error"
PROVIDER_BUSY = "provider_busy"
PROVIDER_PAUSED = "provider_paused"
PROVIDER_TIMEOUT = "provider_timeout"
CALL_CANCELLED = "cancelled"


# --- calling -----------------------------------------------------------------------------------------------------


@dataclass
class PreparedCall:
    """The outcome of the policy step: either a final `result` or what `execute_call` needs (plain values)."""

    started: float
    run_id: uuid.UUID
    company_id: uuid.UUID
    agent_id: uuid.UUID
    tool_name: str
    visible_name: str
    connection_id: uuid.UUID | None = None
    connection_name: str | None = None
    grant_id: uuid.UUID | None = None
    app_definition: Any = None  # the connection's parsed app definition (shared, never modified)
    arguments: dict = field(default_factory=dict)
    # The canonical digest of the projected arguments: what the loop breaker and the run's timeline know of them.
    arguments_digest: str = ""
    decision: str = "allowed"
    # The tool the call resolved to (plain values kept under the access revision), for the limits step.
    target: CallTarget | None = None
    # Counted against the connection's limits already (an ask-first call, before its approval step).
    counted: bool = False
    approval_id: uuid.UUID | None = None
    trust_rule_id: uuid.UUID | None = None  # the "Always allow" rule that let an ask-first call through
    result: dict | None = None
    unknown: bool = False
    # The tool declares an `outputSchema` (its listing entry): the gateway's own refusals are shaped for it.
    has_output_schema: bool = False
    # The connection cannot be called until the responsible person signs in to it again (`gateway/elicitation`).
    needs_person: bool = False

    @property
    def ready(self) -> bool:
        return self.result is None and not self.unknown

    @property
    def consumed_approval(self) -> bool:
        """The policy step wrote before the provider is prepared: it used up an approved card or a rule's use."""
        return self.ready and self.decision in ("approved", ALLOWED_BY_RULE)


class Refusal(dict):
    """A `tools/call` result the gateway made itself (blocked, approval needed, provider failed, cancelled, ...), not
    the provider's: `for_the_tool` shapes it for a tool that declares an output schema."""


def _refusal(reason_code: str, message: str, **extra: Any) -> dict:
    structured = {"reasonCode": reason_code, "message": message, **extra}
    return Refusal(tool_error(f"{reason_code}: {message}", structured))


def for_the_tool(result: dict, has_output_schema: bool) -> dict:
    """The result as the agent's client may receive it for this tool.

    When a tool declares an `outputSchema`, MCP says structured results MUST conform to it, and clients check
    (TypeScript SDK 1.x: "Structured content does not match the tool's output schema", shown instead of the reason).
    The gateway's own refusals have another shape, so for such a tool their structured fields travel as a second text
    block instead (`reasonCode`, `retryAfterSeconds`, ... stay readable), and the result carries no
    `structuredContent`, which an `isError` result need not. The provider's own results pass as they are.
    """
    if not (has_output_schema and isinstance(result, Refusal)) or "structuredContent" not in result:
        return result
    shaped = {key: value for key, value in result.items() if key != "structuredContent"}
    details = {"type": "text", "text": json.dumps(result["structuredContent"], ensure_ascii=False)}
    shaped["content"] = [*result.get("content", []), details]
    return shaped
