"""Which service a card asks for: catalog or configured identity, and the connections that match it."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any, NamedTuple, Protocol

from sqlalchemy import Exists, exists, or_, select

from app.catalog.loader import get_app, logo_url
from app.catalog.schema import AppDefinition
from app.extensions import db
from app.models import (
    ConnectionGrant,
    ToolConnection,
)
from app.models.connections import CUSTOM_APP_SLUG
from app.services.access.effective import connection_is_live
from app.services.intents.card import CONNECTION_PREFIX


@dataclass(frozen=True)
class ServiceIdentity:
    """A connectable service as agents name it: a catalog slug or `connection:<uuid>` for a custom connection."""

    slug: str
    name: str
    description: str | None
    logo_url: str | None
    methods: list[dict]
    source: str  # "catalog" or "configured"
    available: bool
    connection_id: uuid.UUID | None = None

    def described(self) -> dict[str, Any]:
        """The service as a card's setup options and an agent's search results name it (each adds its state)."""
        return {
            "service": self.slug,
            "name": self.name,
            "description": self.description,
            "logoUrl": self.logo_url,
            "methods": self.methods,
            "source": self.source,
        }


class ConnectionFacts(Protocol):
    """What naming a connection as a service reads: a ToolConnection, or a row of its columns (runtime search)."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def app_slug(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def enabled(self) -> bool: ...
    @property
    def auth_kind(self) -> str: ...


def service_slug_of(connection: ConnectionFacts) -> str:
    """Custom MCP connections are their own service; catalog connections belong to their app's slug."""
    if connection.app_slug == CUSTOM_APP_SLUG:
        return f"{CONNECTION_PREFIX}{connection.id}"
    return connection.app_slug


def catalog_service(app_definition: AppDefinition) -> ServiceIdentity:
    return ServiceIdentity(
        slug=app_definition.slug,
        name=app_definition.name,
        description=app_definition.description,
        logo_url=logo_url(app_definition),
        methods=[{"key": m.key, "label": m.label, "auth": m.auth} for m in app_definition.methods],
        source="catalog",
        available=bool(app_definition.methods),
    )


def configured_service(connection: ConnectionFacts, custom: AppDefinition | None = None) -> ServiceIdentity:
    """A custom MCP connection as a service; `custom` is the catalog's custom app, when the caller has it."""
    custom = custom or get_app(CUSTOM_APP_SLUG)
    return ServiceIdentity(
        slug=service_slug_of(connection),
        name=connection.name,
        description=None,
        logo_url=logo_url(custom) if custom is not None else None,
        methods=[{"key": "configured", "label": "Use configured connection", "auth": connection.auth_kind}],
        source="configured",
        available=connection.enabled,
        connection_id=connection.id,
    )


def grant_in_audience(grant: ConnectionGrant, user_id: uuid.UUID | None, agent_id: uuid.UUID | None) -> bool:
    """An active grant of the organization, of this person, or of this agent."""
    if grant.status != "active":
        return False
    return (
        grant.kind == "organization"
        or (grant.kind == "user" and user_id is not None and grant.subject_user_id == user_id)
        or (grant.kind == "agent" and agent_id is not None and grant.subject_agent_id == agent_id)
    )


def reusable_by(connection: ToolConnection, user_id: uuid.UUID | None, agent_id: uuid.UUID | None) -> bool:
    """A connection a card may offer for reuse to this person and agent: live (`connection_is_live`) with an
    active grant in their audience (`grant_in_audience`); installing it is what completing the card adds."""
    return connection_is_live(connection) and any(
        grant_in_audience(g, user_id, agent_id) for g in connection.grants
    )


def grant_in_audience_clause(user_id: uuid.UUID | None, agent_id: uuid.UUID | None) -> Exists:
    """`grant_in_audience` as SQL: the connection in the query has an active grant for this audience."""
    audience = [ConnectionGrant.kind == "organization"]
    if user_id is not None:
        audience.append((ConnectionGrant.kind == "user") & (ConnectionGrant.subject_user_id == user_id))
    if agent_id is not None:
        audience.append((ConnectionGrant.kind == "agent") & (ConnectionGrant.subject_agent_id == agent_id))
    return exists().where(
        ConnectionGrant.connection_id == ToolConnection.id,
        ConnectionGrant.status == "active",
        or_(*audience),
    )


def is_catalog_slug(slug: str) -> bool:
    """A slug `resolve_service` looks up in the catalog (neither a configured connection nor the custom app)."""
    return slug != CUSTOM_APP_SLUG and not slug.startswith(CONNECTION_PREFIX)


def parse_connection_service(slug: str) -> uuid.UUID | None:
    """The connection id of `connection:<uuid>`; identifiers are never interpreted as URLs."""
    if not slug.startswith(CONNECTION_PREFIX):
        return None
    try:
        value = uuid.UUID(slug[len(CONNECTION_PREFIX) :])
    except ValueError:
        return None
    return value if f"{CONNECTION_PREFIX}{value}" == slug else None


def resolve_service(
    company_id: uuid.UUID, slug: str, user_id: uuid.UUID | None, agent_id: uuid.UUID | None
) -> ServiceIdentity | None:
    """The service named by an agent or a card, or None when this audience cannot see such a service."""
    connection_id = parse_connection_service(slug)
    if connection_id is not None:
        connection = db.session.get(ToolConnection, connection_id)
        if (
            connection is None
            or connection.company_id != company_id
            or connection.app_slug != CUSTOM_APP_SLUG
            or connection.status == "archived"
            or not any(grant_in_audience(g, user_id, agent_id) for g in connection.grants)
        ):
            return None
        return configured_service(connection)
    if not is_catalog_slug(slug):
        return None
    app_definition = get_app(slug)
    return catalog_service(app_definition) if app_definition is not None else None


def matching_connections(company_id: uuid.UUID, slug: str) -> list[ToolConnection]:
    """Non-archived connections of the company that serve this service."""
    connection_id = parse_connection_service(slug)
    query = select(ToolConnection).where(
        ToolConnection.company_id == company_id, ToolConnection.status != "archived"
    )
    if connection_id is not None:
        query = query.where(ToolConnection.id == connection_id, ToolConnection.app_slug == CUSTOM_APP_SLUG)
    else:
        query = query.where(ToolConnection.app_slug == slug)
    return list(db.session.scalars(query.order_by(ToolConnection.id)))


class MatchingRow(NamedTuple):
    """What readiness reads of a matching connection, as a plain row (`runtime.lookup`)."""

    id: uuid.UUID
    health_status: str
