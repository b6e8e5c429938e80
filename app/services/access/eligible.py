"""The plain-row reader of effective access: `eligible_access` answers as `effective_access(..., with_tools=False)`
with plain rows (`ConnectionRow`, `GrantRow`), in one statement, for callers that decide eligibility and read only
those columns (the instruction resolver, rebuilt after every access change for about a hundred connections). The
rule is `effective`'s: this module only reads the rows it decides on, and hands them to `effective.accesses_of`.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from typing import Any

from sqlalchemy import Select, Uuid, bindparam, or_

from app.extensions import db
from app.models import ConnectionGrant, Membership, ToolConnection
from app.services.access.effective import (
    AGENT_PARAM,
    COMPANY_PARAM,
    access_params,
    access_statements,
    accesses_of,
)
from app.services.access.rows import ConnectionAccess, ConnectionRow, GrantRow


def eligible_access(
    company_id: uuid.UUID,
    agent_id: uuid.UUID,
    responsible_user_id: uuid.UUID | None = None,
    *,
    connection_ids: list[uuid.UUID] | None = None,
    app_slug: str | None = None,
) -> list[ConnectionAccess[ConnectionRow, GrantRow]]:
    """`effective_access(..., with_tools=False)` as plain rows (`ConnectionRow`, `GrantRow`): the same answer, for
    callers that decide eligibility and read only those columns, in one statement (`_eligible_statement`): each
    connection joined to the grants `select_grant` could pick and to the responsible person's membership.
    `app_slug` keeps only the connections of that app (`connection_ids`, if also given, narrows further)."""
    params = access_params(company_id, agent_id, connection_ids, app_slug)
    params["responsible_user_id"] = responsible_user_id
    statement = _eligible_statement(connection_ids is not None, app_slug is not None)
    rows = db.session.execute(statement, params).all()
    if not rows:
        return []
    width, extras, grant_width = len(ConnectionRow._fields), EXTRA_COLUMNS, len(GrantRow._fields)
    found: dict[uuid.UUID, tuple[ConnectionRow, Sequence[Any]]] = {}
    granted = []
    for row in rows:
        if row[0] not in found:
            found[row[0]] = (ConnectionRow(*row[:width]), row[width : width + extras])
        grant = row[width + extras : width + extras + grant_width]
        if grant[0] is not None:
            granted.append(GrantRow(*grant))
    status, role = rows[0][-2:]
    responsible = responsible_user_id if Membership.write_access(status, role) else None
    return accesses_of(list(found.values()), granted, agent_id, responsible, with_tools=False)


# After a connection's own columns: its access card scope, company-wide, and the two presence columns.
EXTRA_COLUMNS = 4
_RESPONSIBLE = bindparam("responsible_user_id", type_=Uuid)


@functools.cache
def _eligible_statement(by_ids: bool, by_app: bool) -> Select[Any]:
    """`eligible_access`'s one statement: the plain connections statement, each connection joined (outer) to its
    grants that `select_grant` could pick for this run (active; the organization's, this agent's, or the
    responsible person's: it never drops one it would choose) and to the responsible person's membership (its
    status and role, last, the same on every row: `Membership.write_access`). A connection comes once per such
    grant, or once with null grant columns."""
    connections, _ = access_statements(True, False, False, by_ids, by_app)
    candidate = (
        (ConnectionGrant.connection_id == ToolConnection.id)
        & (ConnectionGrant.status == "active")
        & or_(
            ConnectionGrant.kind == "organization",
            (ConnectionGrant.kind == "agent") & (ConnectionGrant.subject_agent_id == AGENT_PARAM),
            (ConnectionGrant.kind == "user") & (ConnectionGrant.subject_user_id == _RESPONSIBLE),
        )
    )
    return (
        connections.add_columns(
            *(getattr(ConnectionGrant, name) for name in GrantRow._fields), Membership.status, Membership.role
        )
        .outerjoin(ConnectionGrant, candidate)
        .outerjoin(
            Membership, (Membership.company_id == COMPANY_PARAM) & (Membership.user_id == _RESPONSIBLE)
        )
        .order_by(ConnectionGrant.id)
    )
