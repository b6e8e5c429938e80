"""The append-only activity log. Only services.activity.record_activity writes it."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import Model
from app.models.base import IdMixin, JSONType, ValueSet, one_of, utcnow


class ActorType(ValueSet):
    USER = "user"
    AGENT = "agent"
    SYSTEM = "system"


class ActivityLog(IdMixin, Model):
    __tablename__ = "activity_log"
    __table_args__ = (
        Index("ix_activity_log_company_created", "company_id", "created_at"),
        Index("ix_activity_log_run", "run_id"),
        one_of("actor_type", ActorType),
    )

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False
    )
    actor_type: Mapped[str] = mapped_column(String(20), nullable=False)
    actor_id: Mapped[str] = mapped_column(String(80), nullable=False)
    action: Mapped[str] = mapped_column(String(120), nullable=False)
    entity_type: Mapped[str] = mapped_column(String(60), nullable=False)
    entity_id: Mapped[str] = mapped_column(String(80), nullable=False)
    agent_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    run_id: Mapped[uuid.UUID | None] = mapped_column(Uuid)
    details: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)
