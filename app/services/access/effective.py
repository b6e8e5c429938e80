"""Effective access: the one place that decides which connections and tools an agent may use, and as whom.

Search readiness, connection requests, setup options, intent completion, the instruction resolver and the tool gateway
all ask this module. Queries are batched per call (a constant number of statements whatever the catalog size).

Identity order, failing closed on ambiguity: the agent's own grant, then the responsible person's personal grant (only
while that person is an active member with write access), then the organization grant (the default one, or the only
active one).

A personal identity belongs to its person: it serves only runs whose responsible person is the grant's owner. A
standing delegation of a personal grant to an agent (written when the owner answers a card) records the owner's
consent; it never lets the agent act as the owner on a run someone else is responsible for.

The rule, "can this agent use this connection now", in one place: ordered checks (`checks`, whose docstring
gives the order and what each decides), run by `ConnectionAccess.first_failure` (`rows`); a decision is "its checks
all pass":

- the connection is installed for the agent, directly or for the whole company (`audience`;
  `installed_connections_query` keeps only those);
- it is live: set up, neither disconnected nor archived, and enabled (`enabled`; `connection_is_live`);
- the run may act as one of its identities (`grant`, `identity_owner`, `credentials`: `select_grant` picks an
  active one; `has_identity`);
- it is healthy: no health status that asks for attention (`health`; `connection_is_healthy`);
- for a tool: an access card's scope covers it (`within_scope_action`) and its action is not `block` (`policy`).

All but the tool's make `usable_now` (the gateway lists and calls such connections); `is_ready` adds "at least one
tool passes `policy`" (readiness, continuation delivery, card completion). Instructions reach an agent for
connections with an identity and a permitted tool whatever their health (`serves_instructions`). The explainer
(`explain`) reads the same checks for one connection, installed and live or not (the `explain` variant of
`access_statements`).

`effective_access` answers with models. `eligible.eligible_access` answers the same question with plain rows of only the
columns an eligibility caller reads (`ConnectionRow`, `GrantRow`): the same rule in one statement (the connections
joined to the grants that could serve the run and to the responsible person's membership), without building ORM
objects or decoding JSON columns until they are read (the instruction resolver, rebuilt after every access change,
asks it for about a hundred connections).
"""

from __future__ import annotations

import functools
import uuid
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from sqlalchemy import (
    BindParameter,
    ColumnElement,
    Select,
    Text,
    Uuid,
    bindparam,
    cast,
    func,
    or_,
    select,
)

from app.extensions import db
from app.models import (
    CatalogApp,
    ConnectionGrant,
    ConnectionInstall,
    ConnectionTool,
    Membership,
    ToolConnection,
    ToolPolicy,
)
from app.models.tenancy import MANAGE_CONNECTIONS
from app.services.access import scopes
from app.services.access.rows import (
    ConnectionAccess,
    ConnectionRow,
    ConnectionT,
    GrantRow,
    GrantT,
    ToolAccess,
)

DEFAULT_TOOL_ACTION = "ask_first"
# An id in a query: a value, or a bound parameter of the statements built once (`access_statements`).
SqlUuid = uuid.UUID | BindParameter[uuid.UUID]
CONFIGURE_FORBIDDEN = (
    "Only the connection creator or a connection manager can configure, reconnect, or delete this connection"
)


def connection_is_live(connection: ToolConnection) -> bool:
    """The `enabled` check: set up and not disconnected or archived, and enabled by its managers."""
    return connection.status == "active" and bool(connection.enabled)


def live_clause() -> ColumnElement[bool]:
    """`connection_is_live` as SQL, for queries over `ToolConnection`."""
    return (ToolConnection.status == "active") & ToolConnection.enabled.is_(True)


def usable_connections(
    accesses: list[ConnectionAccess[ConnectionT, GrantT]],
) -> list[ConnectionAccess[ConnectionT, GrantT]]:
    """The connections of `accesses` the agent may use now (`usable_now`), in order."""
    return [access for access in accesses if access.usable_now]


def connection_access(
    company_id: uuid.UUID,
    agent_id: uuid.UUID,
    responsible_user_id: uuid.UUID | None,
    connection_id: uuid.UUID,
    *,
    with_tools: bool = False,
    responsible_membership: Membership | None = None,
) -> ConnectionAccess[ToolConnection, ConnectionGrant] | None:
    """The agent's access to one connection, or None when it is not installed for the agent or not live."""
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
    grants: list[GrantT],
    agent_id: uuid.UUID | None,
    responsible_user_id: uuid.UUID | None,
) -> GrantT | None:
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


def installed_clause(company_id: SqlUuid, agent_id: SqlUuid) -> ColumnElement[bool]:
    """The `audience` check as SQL, for queries over `ToolConnection`: installed for the agent, directly or
    company-wide (a filter on the hot paths, a column for the explainer)."""
    installed = select(ConnectionInstall.connection_id).where(
        ConnectionInstall.company_id == company_id,
        or_(
            (ConnectionInstall.target_type == "company") & (ConnectionInstall.target_id == company_id),
            (ConnectionInstall.target_type == "agent") & (ConnectionInstall.target_id == agent_id),
        ),
    )
    return (ToolConnection.company_id == company_id) & ToolConnection.id.in_(installed)


def installed_connections_query(company_id: uuid.UUID, agent_id: uuid.UUID) -> Select[ToolConnection]:
    """Connections installed for the agent, either directly or company-wide."""
    return select(ToolConnection).where(installed_clause(company_id, agent_id))


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
    explain: bool = False,
    with_tools: bool = True,
    responsible_membership: Membership | None = None,
) -> list[ConnectionAccess[ToolConnection, ConnectionGrant]]:
    """Every installed, live connection of the agent with its selected identity and tools (policy applied).

    `explain=True` (the explainer, with `connection_ids`): every connection of the company among `connection_ids`,
    installed for the agent and live or not, each access saying whether it is installed (`installed`).

    `with_tools=False` loads only whether each connection has a tool and one that is not blocked (two EXISTS
    columns of the connections' own statement, each stopping at the first such tool), for callers that decide
    readiness or eligibility and never read tool rows (search, requests, instruction resolution, gateway names).
    `responsible_membership` is the responsible person's membership when the caller has just loaded it (runtime
    calls do), saving a query.
    """
    if explain and connection_ids is None:
        raise ValueError("The explainer reads named connections only.")
    connections, grants = access_statements(False, explain, with_tools, connection_ids is not None)
    params = access_params(company_id, agent_id, connection_ids)
    rows = db.session.execute(connections, params).all()
    if not rows:
        return []
    found = [(row[0], row[1:]) for row in rows]
    granted = db.session.scalars(grants, params)
    responsible = responsible_identity(company_id, responsible_user_id, responsible_membership)
    return accesses_of(found, granted, agent_id, responsible, with_tools, explain)


# The statements' parameters: built once per variant and reused, so a call neither builds nor keys SQL again.
COMPANY_PARAM = bindparam("company_id", type_=Uuid)
AGENT_PARAM = bindparam("agent_id", type_=Uuid)
CONNECTION_IDS_PARAM = bindparam("connection_ids", type_=Uuid, expanding=True)
APP_SLUG_PARAM: BindParameter[str] = bindparam("app_slug")  # typed by the column it is compared with


def access_params(
    company_id: uuid.UUID,
    agent_id: uuid.UUID,
    connection_ids: list[uuid.UUID] | None,
    app_slug: str | None = None,
) -> dict[str, Any]:
    params: dict[str, Any] = {"company_id": company_id, "agent_id": agent_id}
    if connection_ids is not None:
        params["connection_ids"] = list(connection_ids)
    if app_slug is not None:
        params["app_slug"] = app_slug
    return params


@functools.cache
def access_statements(
    plain: bool, explain: bool, with_tools: bool, by_ids: bool, by_app: bool = False
) -> tuple[Select[Any], Select[Any]]:
    """The connections statement and the grants statement of one variant (`plain`: the columns of `ConnectionRow`
    and `GrantRow`, else the models).

    Connections: the agent's installed, live connections, each followed by its access card scope, whether it is
    installed company-wide, without tools the two presence columns and, for the explainer (`explain`), whether it
    is installed for the agent: the explainer reads every connection of the company (installed and live or not),
    with the `audience` clause as that last column instead of a filter. Grants: every grant of those connections
    (named by the same criteria rather than by a list of ids).
    """
    installed = installed_clause(COMPANY_PARAM, AGENT_PARAM)
    criteria = [ToolConnection.company_id == COMPANY_PARAM] if explain else [installed, live_clause()]
    if by_ids:
        criteria.append(ToolConnection.id.in_(CONNECTION_IDS_PARAM))
    if by_app:
        criteria.append(ToolConnection.app_slug == APP_SLUG_PARAM)
    if plain:
        catalog_version = (
            select(CatalogApp.content_hash)
            .where(CatalogApp.slug == ToolConnection.app_slug)
            .correlate(ToolConnection)
            .scalar_subquery()
        )
        entities: tuple[Any, ...] = (
            *(getattr(ToolConnection, name) for name in ConnectionRow._fields[:-3]),
            cast(ToolConnection.config, Text),
            cast(ToolConnection.agent_instructions, Text),
            catalog_version,
        )
        grant_columns: tuple[Any, ...] = tuple(getattr(ConnectionGrant, name) for name in GrantRow._fields)
    else:
        entities, grant_columns = (ToolConnection,), (ConnectionGrant,)
    connections = select(
        *entities, scopes.agent_scope_column(AGENT_PARAM), scopes.company_wide_column()
    ).where(*criteria)
    if not with_tools:
        connections = connections.add_columns(*tool_presence_columns())
    if explain:
        connections = connections.add_columns(installed.label("installed"))
    grants = select(*grant_columns).where(
        ConnectionGrant.connection_id.in_(select(ToolConnection.id).where(*criteria))
    )
    return connections.order_by(ToolConnection.id), grants


def accesses_of(
    found: Sequence[tuple[ConnectionT, Sequence[Any]]],
    grants: Iterable[GrantT],
    agent_id: uuid.UUID,
    responsible: uuid.UUID | None,
    with_tools: bool,
    explain: bool = False,
) -> list[ConnectionAccess[ConnectionT, GrantT]]:
    """The accesses of the connections of `access_statements` (each with the columns after its entities): the
    identity `select_grant` picks, the tools within scope, and the facts the checks read (`rows.ConnectionAccess`)."""
    grants_by_connection: dict[uuid.UUID, list[GrantT]] = defaultdict(list)
    for grant in grants:
        grants_by_connection[grant.connection_id].append(grant)
    # Connections the agent reaches only through an access card's scoped install (see `scopes`).
    scoped = {c.id: dict(extra[0]) for c, extra in found if extra[0] is not None and not extra[1]}
    installed = {c.id: bool(extra[-1]) for c, extra in found} if explain else {}
    if not with_tools:
        presence = {c.id: (bool(extra[2]), bool(extra[3])) for c, extra in found}
        if scoped:
            presence.update(_scoped_presence(scoped))
        return [
            ConnectionAccess(
                connection=c,
                grant=select_grant(grants_by_connection[c.id], agent_id, responsible),
                any_tools=presence[c.id][0],
                any_usable_tools=presence[c.id][1],
                tool_scope=scoped.get(c.id),
                installed=installed.get(c.id, True),
                grants=grants_by_connection[c.id],
                agent_id=agent_id,
                responsible=responsible,
            )
            for c, _ in found
        ]
    tools_by_connection = tools_with_policies([c.id for c, _ in found])
    return [
        ConnectionAccess(
            connection=c,
            grant=select_grant(grants_by_connection[c.id], agent_id, responsible),
            tools=_within_scope(tools_by_connection.get(c.id, []), scoped.get(c.id)),
            tool_scope=scoped.get(c.id),
            installed=installed.get(c.id, True),
            grants=grants_by_connection[c.id],
            agent_id=agent_id,
            responsible=responsible,
        )
        for c, _ in found
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


def _scoped_presence(scoped: dict[uuid.UUID, dict[str, str]]) -> dict[uuid.UUID, tuple[bool, bool]]:
    """(any tool, any tool not blocked) of scoped connections, within their scope (one statement, only when the
    agent has any)."""
    tools = tools_with_policies(list(scoped))
    presence = {}
    for connection_id, scope in scoped.items():
        within = _within_scope(tools.get(connection_id, []), scope)
        presence[connection_id] = (bool(within), any(t.action != "block" for t in within))
    return presence


def tool_presence_columns() -> tuple[ColumnElement[bool], ColumnElement[bool]]:
    """Two columns for a query on `ToolConnection`: it has an active tool; it has one not blocked (no policy row
    means ask first). Correlated EXISTS: the database stops at the first such tool of each connection instead of
    counting them all (an agent may reach hundreds of connections with thousands of tools)."""
    active = select(ConnectionTool.id).where(
        ConnectionTool.connection_id == ToolConnection.id, ConnectionTool.status == "active"
    )
    not_blocked = active.outerjoin(
        ToolPolicy,
        policy_of_tool(),
    ).where(func.coalesce(ToolPolicy.action, DEFAULT_TOOL_ACTION) != "block")
    return active.exists().label("any_tools"), not_blocked.exists().label("any_usable_tools")


def policy_of_tool() -> ColumnElement[bool]:
    """How a tool row meets its policy row (outer joins: no policy row means the default action, ask first)."""
    return (ToolPolicy.connection_id == ConnectionTool.connection_id) & (
        ToolPolicy.tool_name == ConnectionTool.name
    )


def tools_with_policies(
    connection_ids: list[uuid.UUID], status: str = "active"
) -> dict[uuid.UUID, list[ToolAccess]]:
    """Active indexed tools of the connections (or those of another `status`: the explainer's quarantined ones)
    with their action policy (no row means ask first)."""
    rows = db.session.execute(
        select(ConnectionTool, ToolPolicy.action, ToolPolicy.pinned)
        .outerjoin(
            ToolPolicy,
            policy_of_tool(),
        )
        .where(ConnectionTool.connection_id.in_(connection_ids), ConnectionTool.status == status)
        .order_by(ConnectionTool.name)
    ).all()
    result: dict[uuid.UUID, list[ToolAccess]] = defaultdict(list)
    for tool, action, pinned in rows:
        result[tool.connection_id].append(
            ToolAccess(tool=tool, action=action or DEFAULT_TOOL_ACTION, pinned=bool(pinned))
        )
    return result
