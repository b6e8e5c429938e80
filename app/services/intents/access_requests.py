"""Access requests: a card asking the responsible person to let the agent use named tools of an existing
connection ("Grant <service> access to <agent>?").

The agent names the tools (`toolNames`, at most 20) or, naming none, asks for the connection's indexed tools, which a
person can review only up to 500. Tools blocked by the connection's policy stay blocked and are left out of the
card. The card's payload carries `accessRequest {connectionId, connectionName, tools: [{toolName, versionHash,
permission}]}`; completing it installs the connection for the agent scoped to those tools (`access.scopes`), read
tools allowed and write tools asking first.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from app.core.errors import Conflict, Forbidden, Unprocessable
from app.models import ToolConnection
from app.services.access import scopes
from app.services.access.effective import tools_with_policies

ACCESS_REQUEST_KEY = "accessRequest"
# The payload's words for a scope's permissions: an access card's tool says `allowed` or `ask_first`.
PAYLOAD_PERMISSIONS = {"allow": "allowed", "ask_first": "ask_first"}
MAX_NAMED_TOOLS = 20
MAX_REVIEWED_TOOLS = 500
ALL_BLOCKED = "Every tool asked for is blocked on this connection. Ask an administrator to review its action permissions."


@dataclass(frozen=True)
class RequestedTool:
    name: str
    version_hash: str
    permission: str  # "allow" (read) or "ask_first" (write)


def review_tools(connection: ToolConnection, tool_names: list[str] | None) -> list[RequestedTool]:
    """The tools an access card for this connection asks for, policy blocks left out (one statement).

    Unknown names and an unnamed request over `MAX_REVIEWED_TOOLS` tools are refused with a message that says
    what to do instead.
    """
    by_name = {
        access.tool.name: access for access in tools_with_policies([connection.id]).get(connection.id, [])
    }
    if tool_names:
        unknown = [name for name in tool_names if name not in by_name]
        if unknown:
            raise Unprocessable(f"{connection.name} has no tool named {', '.join(unknown)}.")
        chosen = [by_name[name] for name in tool_names]
    else:
        if len(by_name) > MAX_REVIEWED_TOOLS:
            raise Unprocessable(
                f"{connection.name} has {len(by_name)} tools, more than a person can review in one card "
                f"({MAX_REVIEWED_TOOLS}). Name the tools you need (toolNames, at most {MAX_NAMED_TOOLS})."
            )
        chosen = list(by_name.values())
    allowed = [access.tool for access in chosen if access.action != "block"]
    if not allowed:
        raise Forbidden(ALL_BLOCKED)
    return [RequestedTool(t.name, t.version_hash, scopes.permission_for(t)) for t in allowed]


def access_request_payload(connection: ToolConnection, tools: list[RequestedTool]) -> dict:
    return {
        "connectionId": str(connection.id),
        "connectionName": connection.name,
        "tools": [
            {
                "toolName": t.name,
                "versionHash": t.version_hash,
                "permission": PAYLOAD_PERMISSIONS[t.permission],
            }
            for t in tools
        ],
    }


def requested_scope(access_request: dict | None) -> dict[str, str] | None:
    """The tool scope an access card grants (None for a connection card, which grants every tool)."""
    if not access_request:
        return None
    from_payload = {word: permission for permission, word in PAYLOAD_PERMISSIONS.items()}
    return {
        tool["toolName"]: from_payload.get(str(tool.get("permission")), "ask_first")
        for tool in access_request.get("tools") or []
        if isinstance(tool, dict) and tool.get("toolName")
    }


# --- the tools as they stand when the card is answered -----------------------------------------------------------


@dataclass(frozen=True)
class ToolStanding:
    """One tool an access card asks for, as it stands now: the permission granting it would give (`allowed`,
    `ask_first`, or `blocked` / `removed`), and why it cannot be granted as asked (None when it can)."""

    name: str
    permission: str
    changed: str | None = None


def tools_as_they_stand(access_request: dict) -> list[ToolStanding]:
    """The requested tools with the connection's current index and policies (one statement): a tool removed,
    blocked, or changed (another version) since the request cannot be granted as it was asked for."""
    try:
        connection_id = uuid.UUID(str(access_request.get("connectionId")))
    except ValueError:
        return []
    current = {
        access.tool.name: access for access in tools_with_policies([connection_id]).get(connection_id, [])
    }
    standing = []
    for asked in access_request.get("tools") or []:
        if not isinstance(asked, dict) or not asked.get("toolName"):
            continue
        name = str(asked["toolName"])
        access = current.get(name)
        if access is None:
            standing.append(ToolStanding(name, "removed", "was removed from the connection"))
            continue
        if access.action == "block":
            standing.append(ToolStanding(name, "blocked", "is blocked on the connection now"))
            continue
        asks_first = access.action == "ask_first" or scopes.permission_for(access.tool) == "ask_first"
        permission = "ask_first" if asks_first else "allowed"
        changed = (
            "changed since the request" if access.tool.version_hash != asked.get("versionHash") else None
        )
        standing.append(ToolStanding(name, permission, changed))
    return standing


def refuse_changed_tools(access_request: dict) -> None:
    """Granting answers the request as it was asked, or not at all: a changed tool refuses the whole grant."""
    changed = [tool for tool in tools_as_they_stand(access_request) if tool.changed]
    if changed:
        reasons = "; ".join(f"{tool.name} {tool.changed}" for tool in changed)
        raise Conflict(
            f"Nothing was granted: {reasons}. Decline this request; the agent can ask again for the tools as they are."
        )
