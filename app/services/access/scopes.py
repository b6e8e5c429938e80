"""Tool scopes: an agent install granted by an access card covers only the tools the card named.

A scoped install carries `tool_scope` = {toolName: "allow" | "ask_first"}: the agent sees only those tools, each at
the stricter of the connection's own policy and the scope's permission (write tools granted by a card ask first; a
block stays a block). An unscoped install of the same agent, or a company-wide install, gives every tool.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from sqlalchemy import BindParameter, Exists, ScalarSelect, exists, select

from app.models import ConnectionInstall, ConnectionTool, ToolConnection

STRICTNESS = {"allow": 0, "ask_first": 1, "block": 2}
SCOPE_PERMISSIONS = ("allow", "ask_first")


def stricter(first: str, second: str) -> str:
    return first if STRICTNESS.get(first, 1) >= STRICTNESS.get(second, 1) else second


def agent_scope_column(agent_id: uuid.UUID | BindParameter[uuid.UUID]) -> ScalarSelect[Any]:
    """The agent's own install's scope for the connection in the query (null when unscoped or absent)."""
    return (
        select(ConnectionInstall.tool_scope)
        .where(
            ConnectionInstall.connection_id == ToolConnection.id,
            ConnectionInstall.target_type == "agent",
            ConnectionInstall.target_id == agent_id,
        )
        .correlate(ToolConnection)
        .scalar_subquery()
    )


def company_wide_column() -> Exists:
    """Whether the connection in the query is installed for every agent of its company."""
    return exists().where(
        ConnectionInstall.connection_id == ToolConnection.id, ConnectionInstall.target_type == "company"
    )


def permission_for(tool: ConnectionTool) -> str:
    """What an access card grants a tool: read tools are allowed, write tools ask first."""
    return "ask_first" if tool.is_write else "allow"


def merged_scope(current: Mapping[str, str] | None, granted: Mapping[str, str]) -> dict[str, str]:
    """Adding tools to a scope: a tool granted again keeps the more permissive of its two permissions."""
    merged = dict(current or {})
    for name, permission in granted.items():
        kept = merged.get(name)
        merged[name] = permission if kept is None or STRICTNESS[permission] < STRICTNESS[kept] else kept
    return merged
