"""Whose a connection is, as people read it: the organization's, or a person's.

A connection's identity decides whose account the agents act with: an `organization` grant is the company's, a `user`
grant is its person's. A draft has no working grant yet: it is its creator's. The Apps catalog says which apps are
connected already (by you, or for the organization); the Connections list shows whose each one is and filters on it.
Each reader works on a list of connections at once, so a long list costs no more round trips than a short one.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass
from typing import Literal

from sqlalchemy import select

from app.extensions import db
from app.models import ConnectionGrant, ToolConnection, User
from app.models.connections import ConnectionStatus, GrantStatus

OwnerFilter = Literal["all", "mine", "organization"]
OWNER_FILTERS: tuple[OwnerFilter, ...] = ("all", "mine", "organization")


@dataclass(frozen=True)
class Ownership:
    """Whose one connection is: the organization's, and/or the people whose own accounts it holds."""

    organization: bool
    people: tuple[tuple[uuid.UUID, str], ...]  # (user id, name)

    def label(self, viewer_id: uuid.UUID) -> str:
        if self.organization:
            return "Organization"
        names = ["You" if user_id == viewer_id else name for user_id, name in self.people]
        return ", ".join(names) if names else "Nobody yet"

    def whose(self, viewer_id: uuid.UUID) -> str:
        """Whose account a reuse of the connection acts with, as a card's dialog says it."""
        if self.organization:
            return "The organization's connection"
        if [user_id for user_id, _name in self.people] == [viewer_id]:
            return "Your connection"
        if len(self.people) == 1:
            return f"{self.people[0][1]}'s connection"
        return f"Connection of {self.label(viewer_id)}" if self.people else "A connection nobody owns yet"

    def is_mine(self, viewer_id: uuid.UUID) -> bool:
        return any(user_id == viewer_id for user_id, _name in self.people)


def ownership_of(connections: list[ToolConnection]) -> dict[uuid.UUID, Ownership]:
    """Each connection's owners from its grants (a draft's: its creator), read for all of them together."""
    if not connections:
        return {}
    ids = [c.id for c in connections]
    rows = db.session.execute(
        select(ConnectionGrant.connection_id, ConnectionGrant.kind, User.id, User.name)
        .outerjoin(User, User.id == ConnectionGrant.subject_user_id)
        .where(ConnectionGrant.connection_id.in_(ids), ConnectionGrant.status != GrantStatus.REVOKED)
        .order_by(User.name)
    ).all()
    organization: set[uuid.UUID] = set()
    people: dict[uuid.UUID, list[tuple[uuid.UUID, str]]] = defaultdict(list)
    for connection_id, kind, user_id, name in rows:
        if kind == "organization":
            organization.add(connection_id)
        elif kind == "user" and user_id is not None and (user_id, name) not in people[connection_id]:
            people[connection_id].append((user_id, name))
    creators = {c.created_by_user_id for c in connections if c.created_by_user_id is not None}
    names = (
        dict(db.session.execute(select(User.id, User.name).where(User.id.in_(creators))).all())
        if creators
        else {}
    )
    result = {}
    for connection in connections:
        owners = people.get(connection.id, [])
        if not owners and connection.id not in organization and connection.created_by_user_id in names:
            owners = [(connection.created_by_user_id, names[connection.created_by_user_id])]
        result[connection.id] = Ownership(connection.id in organization, tuple(owners))
    return result


def keep(ownership: Ownership, owner: OwnerFilter, viewer_id: uuid.UUID) -> bool:
    if owner == "organization":
        return ownership.organization
    if owner == "mine":
        return ownership.is_mine(viewer_id)
    return True


ConnectedBy = Literal["you", "organization", "others"]


def connected_apps(company_id: uuid.UUID, viewer_id: uuid.UUID) -> dict[str, ConnectedBy]:
    """For each app with a live connection in the company, by whom it is connected, as the catalog says it: for the
    organization first, else by you, else by other people (one statement)."""
    rows = db.session.execute(
        select(ToolConnection.app_slug, ConnectionGrant.kind, ConnectionGrant.subject_user_id)
        .join(ConnectionGrant, ConnectionGrant.connection_id == ToolConnection.id)
        .where(
            ToolConnection.company_id == company_id,
            ToolConnection.status == ConnectionStatus.ACTIVE,
            ConnectionGrant.status == GrantStatus.ACTIVE,
        )
    ).all()
    rank = {"organization": 0, "you": 1, "others": 2}
    found: dict[str, ConnectedBy] = {}
    for slug, kind, subject in rows:
        by: ConnectedBy = (
            "organization" if kind == "organization" else "you" if subject == viewer_id else "others"
        )
        if slug not in found or rank[by] < rank[found[slug]]:
            found[slug] = by
    return found
