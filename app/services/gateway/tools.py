"""The gateway's visible tool map: `<connection>__<tool>` names, the tools a run may see, cached listings."""

from __future__ import annotations

import hashlib
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from app.catalog.loader import get_apps
from app.core.errors import Forbidden
from app.models import ConnectionGrant, HeartbeatRun, ToolConnection
from app.services.access.effective import (
    ConnectionAccess,
    ToolAccess,
    effective_access,
    tool_rows_with_actions,
    usable_connections,
    within_scope_action,
)
from app.services.access.revision import RevisionCache
from app.services.gateway.arguments import (
    managed_arguments,
    managed_for_schema,
    pinned_arguments,
    project_schema,
)

SERVER_NAME = "switchboard-tool-gateway"
NAME_SEPARATOR = "__"
SLUG_MAX_LENGTH = 32
NAME_MAX_LENGTH = 128


# --- naming ------------------------------------------------------------------------------------------------------


def connection_slug(name: str) -> str:
    """The stable, name-safe slug of a connection name (see the module docstring)."""
    slug = re.sub(r"[^a-z0-9]+", "-", (name or "").lower()).strip("-")
    slug = slug[:SLUG_MAX_LENGTH].rstrip("-")
    return slug or "connection"


def visible_name(slug: str, tool_name: str) -> str:
    name = f"{slug}{NAME_SEPARATOR}{tool_name}"
    if len(name) <= NAME_MAX_LENGTH:
        return name
    suffix = "-" + hashlib.sha256(tool_name.encode()).hexdigest()[:8]
    return name[: NAME_MAX_LENGTH - len(suffix)] + suffix


def _slugs(connections: list[ToolConnection]) -> dict[uuid.UUID, str]:
    base = {c.id: connection_slug(c.name) for c in connections}
    counts: dict[str, int] = {}
    for slug in base.values():
        counts[slug] = counts.get(slug, 0) + 1
    return {cid: (slug if counts[slug] == 1 else f"{slug}-{cid.hex[:8]}") for cid, slug in base.items()}


# --- the visible tool map ----------------------------------------------------------------------------------------


@dataclass
class GatewayTool:
    name: str
    access: ConnectionAccess
    tool_access: ToolAccess
    app_definition: Any
    managed: dict[str, Any] = field(default_factory=dict)

    @property
    def connection(self) -> ToolConnection:
        return self.access.connection

    @property
    def grant(self) -> ConnectionGrant:
        """The identity a call acts as: gateway tools come from usable accesses only (`_usable`), which have one."""
        if self.access.grant is None:
            raise Forbidden("This connection has no identity the agent may act as.")
        return self.access.grant

    @property
    def action(self) -> str:
        return self.tool_access.action

    def definition(self) -> dict:
        tool = self.tool_access.tool
        return tool_definition(
            self.name,
            tool.name,
            tool.description,
            tool.input_schema,
            tool.is_write,
            self.connection.name,
            self.action,
            self.managed,
            tool.listing,
        )


def tool_definition(
    name: str,
    tool_name: str,
    description: str | None,
    input_schema: dict | None,
    is_write: bool,
    connection_name: str,
    action: str,
    managed: dict[str, Any],
    listing: dict | None = None,
) -> dict:
    """A tool's `tools/list` entry, as the agent sees it (the one place that shapes it). The provider's `title`,
    `outputSchema`, annotations and `_meta` pass through; managed arguments leave the input schema only."""
    description = (description or "").strip()
    note = f"Tool {tool_name} of the connection {connection_name}."
    if action == "ask_first":
        note += " Each call needs approval by the task's responsible person before it runs."
    listing = listing or {}
    # readOnlyHint is always there, so agents can tell reads from writes without guessing from names (it agrees with
    # the provider's hint when it gave one).
    annotations = dict(listing.get("annotations") or {})
    annotations.setdefault("readOnlyHint", not is_write)
    definition = {
        "name": name,
        "description": f"{description}\n\n{note}" if description else note,
        "inputSchema": project_schema(input_schema, managed),
        "annotations": annotations,
    }
    for key in ("title", "outputSchema", "_meta"):
        if key in listing:
            definition[key] = listing[key]
    return definition


def _tools_of(accesses: list, slugs: dict[uuid.UUID, str], include_blocked: bool) -> dict[str, GatewayTool]:
    apps = get_apps(a.connection.app_slug for a in accesses)
    tools: dict[str, GatewayTool] = {}
    for access in accesses:
        if access.connection.id not in slugs:
            continue  # became usable between the two reads of `find_tool`: not listed yet, so not callable
        app_definition = apps.get(access.connection.app_slug)
        for tool_access in access.tools:
            if tool_access.action == "block" and not include_blocked:
                continue
            name = visible_name(slugs[access.connection.id], tool_access.tool.name)
            tools[name] = GatewayTool(
                name=name,
                access=access,
                tool_access=tool_access,
                app_definition=app_definition,
                managed=managed_arguments(access.connection, app_definition, tool_access.tool.input_schema),
            )
    return tools


def tool_map(run: HeartbeatRun) -> dict[str, GatewayTool]:
    """Every tool the run's agent may use now (blocked ones left out), by visible name (constant queries)."""
    accesses = usable_connections(effective_access(run.company_id, run.agent_id, run.responsible_user_id))
    if not accesses:
        return {}
    return _tools_of(accesses, _slugs([a.connection for a in accesses]), include_blocked=False)


def find_tool(run: HeartbeatRun, name: str) -> GatewayTool | None:
    """One tool by visible name, blocked ones included, as `tool_map` would name it.

    An agent may have thousands of tools; a call reads the tool rows of the one connection its name points to.
    Connection slugs depend on every usable connection's name (duplicates get a suffix), so those come first,
    from tool counts alone.
    """
    usable = usable_connections(
        effective_access(run.company_id, run.agent_id, run.responsible_user_id, with_tools=False)
    )
    slugs = _slugs([a.connection for a in usable])
    prefix = name.split(NAME_SEPARATOR, 1)[0]
    ids = [connection_id for connection_id, slug in slugs.items() if slug == prefix]
    if not ids:
        return None
    accesses = usable_connections(
        effective_access(run.company_id, run.agent_id, run.responsible_user_id, connection_ids=ids)
    )
    return _tools_of(accesses, slugs, include_blocked=True).get(name)


# Listings are large (an agent may have thousands of tools), so a process keeps fewer of them than search indexes.
LISTING_CACHE_SIZE = 32
_listings: RevisionCache[list[dict]] = RevisionCache(LISTING_CACHE_SIZE)


def list_tool_definitions(run: HeartbeatRun, access_revision: int) -> list[dict]:
    """The MCP `tools/list` answer for this run: allowed and ask-first tools, blocked ones left out.

    Kept per audience while the company's access revision is unchanged: the listing depends only on
    connections, identities, installs, tools, policies and the catalog, whose writes all raise it. Callers
    serialize the definitions and never modify them.
    """
    return _listings.get_or_build(
        (run.company_id, run.agent_id, run.responsible_user_id),
        access_revision,
        lambda: build_listing(run),
    )


def build_listing(run: HeartbeatRun) -> list[dict]:
    """`[tool.definition() for tool in tool_map(run).values()]`, without a `GatewayTool` or an ORM row per tool.

    The same decisions in the same order (connections by id, tools by name): the usable connections from tool
    counts, then the tools of those connections as plain rows with their action, pinned arguments worked out once
    per connection. A constant number of statements.
    """
    usable = usable_connections(
        effective_access(run.company_id, run.agent_id, run.responsible_user_id, with_tools=False)
    )
    usable = [access for access in usable if access.has_tools]
    if not usable:
        return []
    slugs = _slugs([a.connection for a in usable])
    apps = get_apps(a.connection.app_slug for a in usable)
    connections = {
        a.connection.id: (
            slugs[a.connection.id],
            a.connection.name,
            pinned_arguments(a.connection, apps.get(a.connection.app_slug)),
            a.tool_scope,
        )
        for a in usable
    }
    listing: dict[str, dict] = {}
    for row in tool_rows_with_actions(list(connections)):
        slug, connection_name, pinned, scope = connections[row.connection_id]
        # An access card's scope narrows the tools and can make a write ask first (as `effective_access` does).
        action = within_scope_action(scope, row.name, row.action)
        if action is None or action == "block":
            continue
        name = visible_name(slug, row.name)
        listing[name] = tool_definition(
            name,
            row.name,
            row.description,
            row.input_schema,
            row.is_write,
            connection_name,
            action,
            managed_for_schema(pinned, row.input_schema),
            row.listing,
        )
    return list(listing.values())


def clear_listings() -> None:
    _listings.clear()
