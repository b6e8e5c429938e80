"""OAuth: the server-side state of authorizations in flight, and dynamically registered clients per company and app.

Neither table holds a usable secret in clear: the state value itself is stored only as its SHA-256 digest (the
browser carries the value), and the PKCE verifier and any client secret are encrypted with `secrets_box`.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, String, Text, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import Model
from app.models.base import IdMixin, JSONType, NullableJSONType, TimestampMixin, utcnow


class OAuthState(Model):
    """One authorization in flight: single use (`consumed_at`), short-lived, bound to its user and draft connection."""

    __tablename__ = "oauth_states"
    __table_args__ = (Index("ix_oauth_states_expires_at", "expires_at"),)

    # Lowercase hex SHA-256 of the state value sent to the provider (>= 256 bits of randomness).
    state_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False
    )
    connection_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("tool_connections.id", ondelete="CASCADE"), nullable=False, index=True
    )
    user_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="CASCADE"), nullable=False
    )
    # The identity ("organization" / "user") and agent audience chosen on the draft when the flow started.
    identity: Mapped[str] = mapped_column(String(20), nullable=False)
    audience: Mapped[dict | None] = mapped_column(NullableJSONType)
    code_verifier: Mapped[str | None] = mapped_column(Text)  # encrypted; null when the server has no PKCE
    redirect_uri: Mapped[str] = mapped_column(Text, nullable=False)
    issuer: Mapped[str | None] = mapped_column(Text)
    # Public endpoints and client id used for this authorization ({clientId, tokenEndpoint, userinfoEndpoint, ...}).
    provider: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
    interaction_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("thread_interactions.id", ondelete="CASCADE"), index=True
    )
    opener_origin: Mapped[str | None] = mapped_column(String(300))
    expires_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False)
    consumed_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)


class OAuthClientRegistration(IdMixin, TimestampMixin, Model):
    """A client registered with a provider's authorization server (RFC 7591): once per company and app."""

    __tablename__ = "oauth_client_registrations"
    __table_args__ = (UniqueConstraint("company_id", "app_slug"),)

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False
    )
    app_slug: Mapped[str] = mapped_column(String(80), nullable=False)
    issuer: Mapped[str] = mapped_column(Text, nullable=False)
    client_id: Mapped[str] = mapped_column(Text, nullable=False)
    client_secret_ciphertext: Mapped[str | None] = mapped_column(Text)
    # Public registration metadata and the discovered server endpoints; never the secret or registration token.
    registration: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
