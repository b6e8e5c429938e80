"""Notifications: the outbox of deliveries (email, webhooks), company webhook endpoints, their attempts, and the
per-person email setting.

`services.notifications` is the only writer of `notification_deliveries`: one row per (event, channel, recipient),
inserted in the same transaction as the event it tells about. The notification worker (`app.workers.outbox`)
leases due rows (`next_attempt_at` doubles as the lease, `FOR UPDATE SKIP LOCKED` on PostgreSQL), sends, and marks
them delivered; a row is never sent again once `delivered_at` is set. `dedupe_key` is unique, so "at most one mail
per card" is a database rule, not only application code.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Boolean, DateTime, ForeignKey, Index, Integer, String, Text, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import Model
from app.models.base import IdMixin, JSONType, TimestampMixin, utcnow

CHANNELS = ("email", "webhook")
WEBHOOK_EVENTS = (
    "connection_intent.created",
    "connection_intent.resolved",
    "tool_approval.requested",
    "tool_approval.resolved",
    "connection.connected",
    "connection.needs_reauthorization",
    "connection.disconnected",
    "connection.disabled",
    "connection.enabled",
)


class NotificationDelivery(IdMixin, TimestampMixin, Model):
    """One message to send: an email to a person or a webhook call to an endpoint."""

    __tablename__ = "notification_deliveries"
    __table_args__ = (
        Index("ix_notification_deliveries_due", "delivered_at", "next_attempt_at"),
        Index("ix_notification_deliveries_endpoint", "endpoint_id", "created_at"),
    )

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False, index=True
    )
    event: Mapped[str] = mapped_column(String(80), nullable=False)
    channel: Mapped[str] = mapped_column(String(20), nullable=False)
    recipient_user_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="CASCADE")
    )
    endpoint_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("webhook_endpoints.id", ondelete="CASCADE")
    )
    # The event's content: ids, names and states only (never credentials, arguments or URLs).
    payload: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
    dedupe_key: Mapped[str | None] = mapped_column(String(300), unique=True)
    attempts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    # Set when retries stopped (a day of back-off, or nothing left to send to); the row stays for the record.
    gave_up_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)


class WebhookEndpoint(IdMixin, TimestampMixin, Model):
    """A company's outbound webhook: where to POST which events, signed with a secret kept encrypted."""

    __tablename__ = "webhook_endpoints"

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False, index=True
    )
    url: Mapped[str] = mapped_column(String(2000), nullable=False)
    events: Mapped[list] = mapped_column(JSONType, nullable=False, default=list)
    secret_ciphertext: Mapped[str] = mapped_column(Text, nullable=False)
    enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    created_by_user_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="SET NULL")
    )


class WebhookAttempt(IdMixin, Model):
    """One try at delivering a webhook: what came back and how long it took."""

    __tablename__ = "webhook_attempts"

    delivery_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("notification_deliveries.id", ondelete="CASCADE"), nullable=False, index=True
    )
    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False
    )
    status_code: Mapped[int | None] = mapped_column(Integer)
    error: Mapped[str | None] = mapped_column(Text)
    duration_ms: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)


class NotificationPreference(Model):
    """A person's notification settings (no row: the defaults, email on)."""

    __tablename__ = "notification_preferences"

    user_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="CASCADE"), primary_key=True
    )
    email_enabled: Mapped[bool] = mapped_column(Boolean, nullable=False, default=True)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow, nullable=False
    )
