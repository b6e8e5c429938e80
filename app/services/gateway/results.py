"""What a call comes to: the prepared call, refusal results and their reason codes."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from app.core.mcp_messages import tool_error

APPROVAL_REQUIRED = "approval_required"
APPROVAL_DENIED = "approval_denied"
TARGET_CHANGED = "approved_tool_target_changed"
TOOL_BLOCKED = "tool_blocked"
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
    decision: str = "allowed"
    approval_id: uuid.UUID | None = None
    result: dict | None = None
    unknown: bool = False
    # The connection cannot be called until the responsible person signs in to it again (`gateway/elicitation`).
    needs_person: bool = False

    @property
    def ready(self) -> bool:
        return self.result is None and not self.unknown

    @property
    def consumed_approval(self) -> bool:
        """The policy step wrote before the provider is prepared: it used up an approved card."""
        return self.ready and self.decision == "approved"


def _refusal(reason_code: str, message: str, **extra: Any) -> dict:
    structured = {"reasonCode": reason_code, "message": message, **extra}
    return tool_error(f"{reason_code}: {message}", structured)
