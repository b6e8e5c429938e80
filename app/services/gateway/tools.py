"""The gateway's visible tool map (the tools a run may see, by visible name: `names`) and its cached listings."""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from typing import Any

from app.catalog.loader import get_apps
from app.core.errors import Forbidden
from app.core.raw_json import RawJSON
from app.models import ConnectionGrant, ConnectionTool, HeartbeatRun, Membership, ToolConnection
from app.services.access.effective import effective_access, usable_connections
from app.services.access.revision import RevisionCache
from app.services.access.rows import ConnectionAccess, ToolAccess
from app.services.connections.tool_definitions import reviewed_digest
from app.services.gateway import meta_tools
from app.services.gateway.arguments import managed_arguments
from app.services.gateway.limit_rules import CallLimits
from app.services.gateway.listing import build_listing, tool_definition
from app.services.gateway.names import NAME_MAX_LENGTH as NAME_MAX_LENGTH
from app.services.gateway.names import NAME_SEPARATOR as NAME_SEPARATOR
from app.services.gateway.names import SLUG_MAX_LENGTH as SLUG_MAX_LENGTH
from app.services.gateway.names import connection_slug as connection_slug
from app.services.gateway.names import connection_slugs as _slugs
from app.services.gateway.names import slug_of_name, tool_name_budget, visible_names
from app.services.gateway.names import visible_name as visible_name

SERVER_NAME = "switchboard-tool-gateway"


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


def _tools_of(
    accesses: list, slugs: dict[uuid.UUID, str], include_blocked: bool, budget: int
) -> dict[str, GatewayTool]:
    apps = get_apps(a.connection.app_slug for a in accesses)
    tools: dict[str, GatewayTool] = {}
    for access in accesses:
        if access.connection.id not in slugs:
            continue  # became usable between the two reads of `find_tool`: not listed yet, so not callable
        app_definition = apps.get(access.connection.app_slug)
        # Named among all the tools the agent reaches on the connection, blocked ones included (as the listing).
        names = visible_names(slugs[access.connection.id], (t.tool.name for t in access.tools), budget)
        for tool_access in access.tools:
            if tool_access.action == "block" and not include_blocked:
                continue
            name = names[tool_access.tool.name]
            tools[name] = GatewayTool(
                name=name,
                access=access,
                tool_access=tool_access,
                app_definition=app_definition,
                managed=managed_arguments(access.connection, app_definition, tool_access.tool.input_schema),
            )
    return tools


def _named(accesses: list, budget: int) -> dict[uuid.UUID, str]:
    """The slugs of the connections that have tools the agent reaches (the ones a listing shows): a same-named
    connection without tools renames none of them (`listing.build_listing` reads the same set)."""
    return _slugs([a.connection for a in accesses if a.has_tools], budget)


def tool_map(run: HeartbeatRun, budget: int | None = None) -> dict[str, GatewayTool]:
    """Every tool the run's agent may use now (blocked ones left out), by visible name (constant queries), named
    within `budget` (None: the `GATEWAY_TOOL_NAME_BUDGET` setting; the gateway passes the agent's, `names`)."""
    budget = budget or tool_name_budget(None)
    accesses = usable_connections(effective_access(run.company_id, run.agent_id, run.responsible_user_id))
    if not accesses:
        return {}
    return _tools_of(accesses, _named(accesses, budget), False, budget)


def find_tool(
    run: HeartbeatRun, name: str, budget: int | None = None, membership: Membership | None = None
) -> GatewayTool | None:
    """One tool by visible name, blocked ones included, as `tool_map` would name it within `budget`.

    An agent may have thousands of tools; a call reads the tool rows of the one connection its name points to.
    Connection slugs depend on every usable connection's name (duplicates get a suffix), so those come first,
    from tool counts alone. `membership` is the responsible person's, when the caller has just loaded it.
    """
    budget = budget or tool_name_budget(None)
    audience = (run.company_id, run.agent_id, run.responsible_user_id)
    usable = usable_connections(
        effective_access(*audience, with_tools=False, responsible_membership=membership)
    )
    slugs = _named(usable, budget)
    prefix = slug_of_name(name)
    ids = [connection_id for connection_id, slug in slugs.items() if slug == prefix]
    if not ids:
        return None
    accesses = usable_connections(
        effective_access(*audience, connection_ids=ids, responsible_membership=membership)
    )
    return _tools_of(accesses, slugs, True, budget).get(name)


@dataclass(frozen=True)
class CallTarget:
    """What a `tools/call` needs of one visible tool, as plain values (no database object: it is cached).

    Callers never modify `managed` or `input_schema` (shared between the calls of one access revision).
    """

    name: str
    tool_name: str
    action: str
    is_write: bool
    input_schema: dict | None
    managed: dict[str, Any]
    connection_id: uuid.UUID
    connection_name: str
    grant_id: uuid.UUID
    app_definition: Any
    has_output_schema: bool = False
    # The connection's rate limits and loop breaker (`gateway.limits`): part of the connection row, so a change
    # raises the access revision like every other input of a call target.
    call_limits: CallLimits = CallLimits.of(None)
    # The reviewed definition's digest (`tool_definitions`): approvals and trust rules are bound to it.
    definition_digest: str = ""

    @classmethod
    def of(cls, tool: GatewayTool) -> CallTarget:
        assert tool.access.grant is not None  # `_usable` keeps connections with an identity only
        raw = tool.tool_access.tool
        return cls(
            name=tool.name,
            tool_name=raw.name,
            action=tool.action,
            is_write=changes_things(raw),
            input_schema=raw.input_schema,
            managed=tool.managed,
            connection_id=tool.connection.id,
            connection_name=tool.connection.name,
            grant_id=tool.access.grant.id,
            app_definition=tool.app_definition,
            has_output_schema=bool((raw.listing or {}).get("outputSchema")),
            call_limits=CallLimits.of(tool.connection.call_limits),
            definition_digest=reviewed_digest(raw),
        )


# Per audience and access revision: visible name -> its target (None: no such tool), filled call by call. What
# `find_tool` reads (connections, identities, installs, tools, policies, memberships, the catalog) all raises the
# revision, as for listings, so a call is never resolved against an older state than the agent's listing.
CALL_TARGET_AUDIENCES = 256
CALL_TARGET_NAMES = 512  # per audience: names beyond these are resolved afresh on every call
_call_targets: RevisionCache[dict[str, CallTarget | None]] = RevisionCache(CALL_TARGET_AUDIENCES)


def call_target(
    run: HeartbeatRun,
    name: str,
    access_revision: int,
    budget: int | None = None,
    membership: Membership | None = None,
) -> CallTarget | None:
    """The tool a `tools/call` names (`find_tool`), kept per audience and name budget while the access revision is
    unchanged: a repeated call of a tool reads no access rows."""
    budget = budget or tool_name_budget(None)
    names = _call_targets.get_or_build(
        (run.company_id, run.agent_id, run.responsible_user_id, budget), access_revision, dict
    )
    if name in names:
        return names[name]
    tool = find_tool(run, name, budget, membership)
    target = CallTarget.of(tool) if tool is not None else None
    if len(names) < CALL_TARGET_NAMES:
        names[name] = target
    return target


# Listings are large (an agent may have thousands of tools), so a process keeps fewer of them than search indexes.
LISTING_CACHE_SIZE = 32
_listings: RevisionCache[Listing] = RevisionCache(LISTING_CACHE_SIZE)


@dataclass(frozen=True)
class Listing(RawJSON):
    """A run's `tools/list` answer as JSON text, with the entries of its pinned tools (a JSON array's text too):
    what the gateway lists beside the meta tools (`meta_tools.with_pinned`)."""

    pinned: str = "[]"


def _listing(run: HeartbeatRun, budget: int) -> Listing:
    pinned: list[str] = []
    text = build_listing(run, budget, pinned)
    return Listing(text, "[" + ", ".join(pinned) + "]")


def list_tool_definitions(run: HeartbeatRun, access_revision: int, budget: int | None = None) -> Listing:
    """The MCP `tools/list` answer for this run: allowed and ask-first tools, blocked ones left out, named within
    `budget` (None: the `GATEWAY_TOOL_NAME_BUDGET` setting; the gateway passes the agent's, `names`).

    Kept per audience and name budget while the company's access revision is unchanged: the listing depends only
    on connections, identities, installs, tools, policies and the catalog, whose writes all raise it, and on the
    budget (the agent's adapter type, or the setting). Kept as its JSON text: one string per audience instead of
    some ten objects per tool, and a repeated listing is not serialized again.
    """
    budget = budget or tool_name_budget(None)
    return _listings.get_or_build(
        (run.company_id, run.agent_id, run.responsible_user_id, budget),
        access_revision,
        lambda: _listing(run, budget),
    )


def clear_listings() -> None:
    """Forget every cached listing and call target (what an access change does to them)."""
    _listings.clear()
    _call_targets.clear()
    meta_tools.clear()


def changes_things(tool: ConnectionTool) -> bool:
    """Whether a tool changes things, the one rule a read-only caller is held to: the classification stored on the
    tool row when it was indexed (`adapters.providers.tools.tool_is_write`, erring towards "write"), which the
    listing and the call both read. A provider's `readOnlyHint` that says otherwise is passed through in the entry,
    but never decides what a read-only assistant may list or call."""
    return bool(tool.is_write)


def only_reading(listing: Listing, run: HeartbeatRun, budget: int | None = None) -> Listing:
    """The listing (and its pinned entries) without the tools that change things (`changes_things`), for an
    assistant connected read-only; a call to one of them is refused with the same rule (`gateway.calls`). Reads the
    run's tool map (a read-only listing only)."""
    writing = {name for name, tool in tool_map(run, budget).items() if changes_things(tool.tool_access.tool)}

    def reading(text: str) -> str:
        return json.dumps([t for t in json.loads(text) if t.get("name") not in writing])

    return Listing(reading(listing.text), reading(listing.pinned))
