"""Assistants (issue 29): MCP clients a person signed in through Switchboard's authorization server.

A client is known by its `client_id`: an HTTPS URL whose client ID metadata document was fetched, or an id issued by
dynamic registration (RFC 7591). A person's consent for one client in one company is an `AssistantGrant`: it owns the
assistant's agent record and the open-ended run its gateway calls belong to. Codes, tokens and device codes are
stored as SHA-256 hashes only; each token row is one issuance (an access token and its refresh token) in a family
that starts at one code or device approval, so reusing a rotated refresh token revokes the whole family.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Boolean, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.extensions import Model
from app.models.base import IdMixin, JSONType, NullableJSONType, ValueSet, one_of, utcnow


class ClientKind(ValueSet):
    METADATA_DOCUMENT = "metadata_document"
    REGISTERED = "registered"


class AssistantClient(IdMixin, Model):
    __tablename__ = "assistant_clients"
    __table_args__ = (one_of("kind", ClientKind),)

    client_id: Mapped[str] = mapped_column(String(2048), nullable=False, unique=True)
    kind: Mapped[str] = mapped_column(String(20), nullable=False)
    client_name: Mapped[str] = mapped_column(String(200), nullable=False)
    client_uri: Mapped[str | None] = mapped_column(Text)
    logo_uri: Mapped[str | None] = mapped_column(Text)
    # The logo of a metadata-document client, fetched through the outbound guard with its document and kept as a
    # data: URL (pages load images from this origin or data: only); raster formats only, never SVG.
    logo_data: Mapped[str | None] = mapped_column(Text)
    redirect_uris: Mapped[list] = mapped_column(JSONType, nullable=False, default=list)
    grant_types: Mapped[list] = mapped_column(JSONType, nullable=False, default=list)
    token_endpoint_auth_method: Mapped[str] = mapped_column(String(40), nullable=False, default="none")
    client_secret_hash: Mapped[str | None] = mapped_column(String(64))
    # The metadata document or registration request as received (for the consent page and for audit).
    document: Mapped[dict | None] = mapped_column(NullableJSONType)
    fetched_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)


class AssistantGrant(IdMixin, Model):
    """One person's consent for one client in one company: the assistant agent, its session run, read-only."""

    __tablename__ = "assistant_grants"
    __table_args__ = (UniqueConstraint("company_id", "user_id", "client_pk"),)

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False, index=True
    )
    user_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True
    )
    client_pk: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("assistant_clients.id", ondelete="CASCADE"), nullable=False
    )
    agent_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("agents.id", ondelete="CASCADE"), nullable=False, unique=True
    )
    issue_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, ForeignKey("issues.id", ondelete="SET NULL"))
    run_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("heartbeat_runs.id", ondelete="SET NULL")
    )
    read_only: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)
    consented_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    disconnected_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    client: Mapped[AssistantClient] = relationship()


class AssistantCode(IdMixin, Model):
    """An authorization code (hashed), bound to its client, redirect URI, PKCE challenge and resource."""

    __tablename__ = "assistant_codes"

    code_hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    grant_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("assistant_grants.id", ondelete="CASCADE"), nullable=False, index=True
    )
    client_id: Mapped[str] = mapped_column(String(2048), nullable=False)
    redirect_uri: Mapped[str] = mapped_column(Text, nullable=False)
    scope: Mapped[str] = mapped_column(String(200), nullable=False, default="")
    resource: Mapped[str] = mapped_column(Text, nullable=False)
    code_challenge: Mapped[str] = mapped_column(String(128), nullable=False)
    code_challenge_method: Mapped[str] = mapped_column(String(10), nullable=False)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)


class AssistantToken(IdMixin, Model):
    """One issuance: an access token and its refresh token (both hashed), in a family of rotations."""

    __tablename__ = "assistant_tokens"

    grant_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("assistant_grants.id", ondelete="CASCADE"), nullable=False, index=True
    )
    family_id: Mapped[uuid.UUID] = mapped_column(Uuid, nullable=False, index=True)
    client_id: Mapped[str] = mapped_column(String(2048), nullable=False)
    access_token_hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    refresh_token_hash: Mapped[str | None] = mapped_column(String(64), unique=True)
    scope: Mapped[str] = mapped_column(String(200), nullable=False, default="")
    resource: Mapped[str] = mapped_column(Text, nullable=False)
    access_expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    refresh_expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    rotated_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # its refresh token was used
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)


class AssistantDeviceCode(IdMixin, Model):
    """A device authorization (RFC 8628): the device code hashed, the user code a person types, and the grant once
    a signed-in person approved it."""

    __tablename__ = "assistant_device_codes"

    device_code_hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    user_code: Mapped[str] = mapped_column(String(16), nullable=False, unique=True)
    client_id: Mapped[str] = mapped_column(String(2048), nullable=False)
    scope: Mapped[str] = mapped_column(String(200), nullable=False, default="")
    resource: Mapped[str] = mapped_column(Text, nullable=False)
    interval: Mapped[int] = mapped_column(Integer, nullable=False, default=5)
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    grant_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("assistant_grants.id", ondelete="CASCADE")
    )
    denied_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_polled_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)
