"""Effective access: the one place that decides which connections and tools an agent may use, and as whom.

Search readiness, connection requests, setup options, intent completion, the instruction resolver and the tool gateway
all ask this module. Queries are batched per call (a constant number of statements whatever the catalog size).

Identity order, failing closed on ambiguity: the agent's own grant, then the responsible person's personal grant (only
while that person is an active member with write access), then the organization grant (the default one, or the only
active one).

A personal identity belongs to its person: it serves only runs whose responsible person is the grant's owner. A
standing delegation of a personal grant to an agent (written when the owner answers a card) records the owner's
consent; it never lets the agent act as the owner on a run someone else is responsible for.

The rule, "can this agent use this connection now", in one place (every caller asks `ConnectionAccess`):

1. the connection is installed for the agent, directly or for the whole company (`installed_connections_query`);
2. it is live: set up, neither disconnected nor archived, and enabled (`connection_is_live`);
3. the run may act as one of its identities (`select_grant` picks an active one; `has_identity`);
4. it is healthy: no health status that asks for attention (`connection_is_healthy`);
5. for a tool: an access card's scope covers it (`within_scope_action`) and its action is not `block`.

1-4 make `usable_now` (the gateway lists and calls such connections); `is_ready` adds "at least one tool passes 5"
(readiness, continuation delivery, card completion). Instructions reach an agent for connections with an identity and
a permitted tool whatever their health (`serves_instructions`).
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Protocol

from sqlalchemy import ColumnElement, Select, case, func, or_, select

from app.extensions import db
from app.models import (
    ConnectionGrant,
    ConnectionInstall,
    ConnectionTool,
    Membership,
    ToolConnection,
    ToolPolicy,
)
from app.models.connections import ATTENTION_HEALTH
from app.models.tenancy import MANAGE_CONNECTIONS
from app.services.access import scopes

DEFAULT_TOOL_ACTION = "ask_first"
CONFIGURE_FORBIDDEN = (
    "Only the connection creator or a connection manager can configure, reconnect, or delete this connection"
)


@dataclass
class ToolAccess:
    tool: ConnectionTool
    action: str


@dataclass
class ConnectionAccess:
    connection: ToolConnection
    grant: ConnectionGrant | None
    tools: list[ToolAccess] = field(default_factory=list)
    # With `with_tools=False` only these counts are loaded (readiness needs no tool rows).
    tool_count: int | None = None
    usable_tool_count: int | None = None
    # The access card's scope when the agent reaches this connection only through one (see `scopes`); callers that
    # read plain tool rows themselves (gateway listings) apply it with `within_scope_action`.
    tool_scope: dict[str, str] | None = None

    @property
    def usable_tools(self) -> list[ToolAccess]:
        return [t for t in self.tools if t.action != "block"]

    @property
    def has_tools(self) -> bool:
        return bool(self.tools) if self.tool_count is None else self.tool_count > 0

    @property
    def has_usable_tools(self) -> bool:
        """At least one tool that is allowed or asks first (blocked tools do not count)."""
        return bool(self.usable_tools) if self.usable_tool_count is None else self.usable_tool_count > 0

    @property
    def has_identity(self) -> bool:
        """Rule step 3: an active identity this run may act as."""
        return self.grant is not None and self.grant.status == "active"

    @property
    def is_healthy(self) -> bool:
        """Rule step 4."""
        return connection_is_healthy(self.connection)

    @property
    def usable_now(self) -> bool:
        """Rule steps 1-4 (steps 1 and 2 hold for every access `effective_access` returns by default)."""
        return self.has_identity and self.is_healthy

    @property
    def is_ready(self) -> bool:
        """Installed, enabled, healthy, with a usable identity and at least one permitted tool."""
        return self.usable_now and self.has_usable_tools

    @property
    def serves_instructions(self) -> bool:
        """An identity and a permitted tool: the connection's instructions reach the agent (health aside)."""
        return self.has_identity and self.has_usable_tools

    @property
    def callable_tool_names(self) -> set[str]:
        """Names of the tools the agent may call now (none unless `usable_now`); needs `with_tools=True`."""
        return {t.tool.name for t in self.usable_tools} if self.usable_now else set()


def connection_is_live(connection: ToolConnection) -> bool:
    """Rule step 2: set up and not disconnected or archived, and enabled by its managers."""
    return connection.status == "active" and bool(connection.enabled)


def live_clause() -> ColumnElement[bool]:
    """`connection_is_live` as SQL, for queries over `ToolConnection`."""
    return (ToolConnection.status == "active") & ToolConnection.enabled.is_(True)


class HasHealth(Protocol):
    """A connection model or a plain row of its columns: what the health step reads."""

    @property
    def health_status(self) -> str | None: ...


def connection_is_healthy(connection: HasHealth) -> bool:
    """Rule step 4: no health status that asks for attention (anything with a `health_status`: rows or models)."""
    return connection.health_status not in ATTENTION_HEALTH


def usable_connections(accesses: list[ConnectionAccess]) -> list[ConnectionAccess]:
    """The connections of `accesses` the agent may use now (rule steps 1-4), in order."""
    return [access for access in accesses if access.usable_now]


def connection_access(
    company_id: uuid.UUID,
    agent_id: uuid.UUID,
    responsible_user_id: uuid.UUID | None,
    connection_id: uuid.UUID,
    *,
    with_tools: bool = False,
    responsible_membership: Membership | None = None,
) -> ConnectionAccess | None:
    """The agent's access to one connection, or None when rule steps 1-2 fail (not installed for it, not live)."""
    found = effective_access(
        company_id,
        agent_id,
        responsible_user_id,
        connection_ids=[connection_id],
        with_tools=with_tools,
        responsible_membership=responsible_membership,
    )
    return found[0] if found else None


def can_manage_connections(membership: Membership | None) -> bool:
    return membership is not None and membership.has_permission(MANAGE_CONNECTIONS)


def can_configure(membership: Membership | None, connection: ToolConnection) -> bool:
    """An active non-viewer who created the connection or holds tools:manage_connections."""
    if (
        membership is None
        or not membership.has_write_access
        or membership.company_id != connection.company_id
    ):
        return False
    return connection.created_by_user_id == membership.user_id or can_manage_connections(membership)


def select_grant(
    grants: list[ConnectionGrant],
    agent_id: uuid.UUID | None,
    responsible_user_id: uuid.UUID | None,
) -> ConnectionGrant | None:
    """Pick the identity for one connection from its grants (see module docstring).

    `responsible_user_id` is the run's responsible person while they are an active member with write access (else
    None): the only person whose personal grant may be used. Two candidates at the same level are ambiguous and
    resolve to no identity.
    """
    active = [g for g in grants if g.status == "active"]
    if agent_id is not None:
        for grant in active:
            if grant.kind == "agent" and grant.subject_agent_id == agent_id:
                return grant
    if responsible_user_id is not None:
        for grant in active:
            if grant.kind == "user" and grant.subject_user_id == responsible_user_id:
                return grant
    organization = [g for g in active if g.kind == "organization"]
    defaults = [g for g in organization if g.is_default]
    if len(defaults) == 1:
        return defaults[0]
    if len(organization) == 1:
        return organization[0]
    return None


def installed_connections_query(company_id: uuid.UUID, agent_id: uuid.UUID) -> Select[ToolConnection]:
    """Connections installed for the agent, either directly or company-wide."""
    installed = select(ConnectionInstall.connection_id).where(
        ConnectionInstall.company_id == company_id,
        or_(
            (ConnectionInstall.target_type == "company") & (ConnectionInstall.target_id == company_id),
            (ConnectionInstall.target_type == "agent") & (ConnectionInstall.target_id == agent_id),
        ),
    )
    return select(ToolConnection).where(
        ToolConnection.company_id == company_id, ToolConnection.id.in_(installed)
    )


def responsible_identity(
    company_id: uuid.UUID, responsible_user_id: uuid.UUID | None, membership: Membership | None = None
) -> uuid.UUID | None:
    """The responsible person's id while they are an active member with write access, else None.

    `membership` is theirs when the caller loaded it in this transaction already (it is re-read otherwise).
    """
    if responsible_user_id is None:
        return None
    if membership is None or (membership.company_id, membership.user_id) != (company_id, responsible_user_id):
        membership = db.session.scalar(
            select(Membership).where(
                Membership.company_id == company_id, Membership.user_id == responsible_user_id
            )
        )
    return responsible_user_id if membership is not None and membership.has_write_access else None


def effective_access(
    company_id: uuid.UUID,
    agent_id: uuid.UUID,
    responsible_user_id: uuid.UUID | None = None,
    *,
    connection_ids: list[uuid.UUID] | None = None,
    include_inactive: bool = False,
    with_tools: bool = True,
    responsible_membership: Membership | None = None,
) -> list[ConnectionAccess]:
    """Every installed connection of the agent with its selected identity and tools (policy applied).

    `with_tools=False` loads only per-connection tool counts, for callers that decide readiness or eligibility
    and never read tool rows (search, requests, instruction resolution). `responsible_membership` is the
    responsible person's membership when the caller has just loaded it (runtime calls do), saving a query.
    """
    query = installed_connections_query(company_id, agent_id).add_columns(
        scopes.agent_scope_column(agent_id), scopes.company_wide_column()
    )
    if not include_inactive:
        query = query.where(live_clause())
    if connection_ids is not None:
        query = query.where(ToolConnection.id.in_(connection_ids))
    rows = db.session.execute(query.order_by(ToolConnection.id)).all()
    if not rows:
        return []
    connections = [row[0] for row in rows]
    # Connections the agent reaches only through an access card's scoped install (see `scopes`).
    scoped = {row[0].id: dict(row[1]) for row in rows if row[1] is not None and not row[2]}
    ids = [c.id for c in connections]
    grants_by_connection: dict[uuid.UUID, list[ConnectionGrant]] = defaultdict(list)
    for grant in db.session.scalars(select(ConnectionGrant).where(ConnectionGrant.connection_id.in_(ids))):
        grants_by_connection[grant.connection_id].append(grant)
    responsible = responsible_identity(company_id, responsible_user_id, responsible_membership)
    if not with_tools:
        counts = tool_counts(ids)
        if scoped:
            counts.update(_scoped_counts(scoped))
        return [
            ConnectionAccess(
                connection=c,
                grant=select_grant(grants_by_connection[c.id], agent_id, responsible),
                tool_count=counts.get(c.id, (0, 0))[0],
                usable_tool_count=counts.get(c.id, (0, 0))[1],
                tool_scope=scoped.get(c.id),
            )
            for c in connections
        ]
    tools_by_connection = tools_with_policies(ids)
    return [
        ConnectionAccess(
            connection=c,
            grant=select_grant(grants_by_connection[c.id], agent_id, responsible),
            tools=_within_scope(tools_by_connection.get(c.id, []), scoped.get(c.id)),
            tool_scope=scoped.get(c.id),
        )
        for c in connections
    ]


def within_scope_action(scope: dict[str, str] | None, tool_name: str, action: str) -> str | None:
    """A plain tool row's action under an access card's scope: None when the scope leaves the tool out."""
    if scope is None:
        return action
    if tool_name not in scope:
        return None
    return scopes.stricter(action, scope[tool_name])


def _within_scope(tools: list[ToolAccess], scope: dict[str, str] | None) -> list[ToolAccess]:
    """The tools an access card's scope covers, each at the stricter of its policy and the card's permission."""
    if scope is None:
        return tools
    scoped = ((t, within_scope_action(scope, t.tool.name, t.action)) for t in tools)
    return [ToolAccess(tool=t.tool, action=action) for t, action in scoped if action is not None]


def _scoped_counts(scoped: dict[uuid.UUID, dict[str, str]]) -> dict[uuid.UUID, tuple[int, int]]:
    """Tool counts of scoped connections (one statement, only when the agent has any)."""
    tools = tools_with_policies(list(scoped))
    counts = {}
    for connection_id, scope in scoped.items():
        within = _within_scope(tools.get(connection_id, []), scope)
        counts[connection_id] = (len(within), sum(1 for t in within if t.action != "block"))
    return counts


def tool_counts(connection_ids: list[uuid.UUID]) -> dict[uuid.UUID, tuple[int, int]]:
    """(active tools, tools not blocked) per connection in one aggregate query; no row means ask first."""
    not_blocked = case((func.coalesce(ToolPolicy.action, DEFAULT_TOOL_ACTION) != "block", 1), else_=0)
    rows = db.session.execute(
        select(ConnectionTool.connection_id, func.count(ConnectionTool.id), func.sum(not_blocked))
        .outerjoin(
            ToolPolicy,
            (ToolPolicy.connection_id == ConnectionTool.connection_id)
            & (ToolPolicy.tool_name == ConnectionTool.name),
        )
        .where(ConnectionTool.connection_id.in_(connection_ids), ConnectionTool.status == "active")
        .group_by(ConnectionTool.connection_id)
    ).all()
    return {connection_id: (int(total), int(usable or 0)) for connection_id, total, usable in rows}


def tool_rows_with_actions(connection_ids: list[uuid.UUID]) -> list:
    """`tools_with_policies` as plain rows (connection_id, name, description, input_schema, is_write, listing, action),
    ordered by connection and name, for callers that read thousands of tools and keep none (gateway listings)."""
    if not connection_ids:
        return []
    return list(
        db.session.execute(
            select(
                ConnectionTool.connection_id,
                ConnectionTool.name,
                ConnectionTool.description,
                ConnectionTool.input_schema,
                ConnectionTool.is_write,
                ConnectionTool.listing,
                func.coalesce(ToolPolicy.action, DEFAULT_TOOL_ACTION).label("action"),
            )
            .outerjoin(
                ToolPolicy,
                (ToolPolicy.connection_id == ConnectionTool.connection_id)
                & (ToolPolicy.tool_name == ConnectionTool.name),
            )
            .where(ConnectionTool.connection_id.in_(connection_ids), ConnectionTool.status == "active")
            .order_by(ConnectionTool.connection_id, ConnectionTool.name)
        )
    )


def tools_with_policies(connection_ids: list[uuid.UUID]) -> dict[uuid.UUID, list[ToolAccess]]:
    """Active indexed tools of the connections with their action policy (no row means ask first)."""
    rows = db.session.execute(
        select(ConnectionTool, ToolPolicy.action)
        .outerjoin(
            ToolPolicy,
            (ToolPolicy.connection_id == ConnectionTool.connection_id)
            & (ToolPolicy.tool_name == ConnectionTool.name),
        )
        .where(ConnectionTool.connection_id.in_(connection_ids), ConnectionTool.status == "active")
        .order_by(ConnectionTool.name)
    ).all()
    result: dict[uuid.UUID, list[ToolAccess]] = defaultdict(list)
    for tool, action in rows:
        result[tool.connection_id].append(ToolAccess(tool=tool, action=action or DEFAULT_TOOL_ACTION))
    return result
