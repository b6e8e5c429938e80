"""Connection intents: the content-free continuation outbox written when a connection card is resolved.

The card itself is a `ThreadInteraction` of kind `connection_intent` (see `app.models.work`). Resolving it (connected
or declined) inserts one `ConnectionIntentDelivery` row in the same transaction; the continuation worker leases due
rows (`next_attempt_at` doubles as the lease) and wakes the assignee exactly once.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import Model
from app.models.base import utcnow


class ConnectionIntentDelivery(Model):
    __tablename__ = "connection_intent_deliveries"
    __table_args__ = (Index("ix_connection_intent_deliveries_pending", "delivered_at", "next_attempt_at"),)

    interaction_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("thread_interactions.id", ondelete="CASCADE"), primary_key=True
    )
    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False
    )
    next_attempt_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)
    delivered_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)
