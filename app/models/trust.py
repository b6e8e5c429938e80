"""Trust rules: a person's "Always allow" on a tool approval card.

A rule lets an agent call one tool of one connection without asking again, within the scope the person chose on
the card: this task, or this agent on this connection; optionally only the exact arguments of the card; until an
expiry or for a number of calls. It is bound to the tool's definition digest at the time it was made: when the
provider changes the tool (`connections.tool_definitions`), the rule is void.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, Integer, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.extensions import Model
from app.models.base import IdMixin, NullableJSONType, TimestampMixin, ValueSet, one_of
from app.models.tenancy import User


class TrustScope(ValueSet):
    TASK = "task"  # this agent, this connection's tool, on the card's task only
    AGENT_CONNECTION = "agent_connection"  # this agent, this connection's tool, on any task


class ToolTrustRule(IdMixin, TimestampMixin, Model):
    __tablename__ = "tool_trust_rules"
    __table_args__ = (
        one_of("scope", TrustScope),
        Index("ix_tool_trust_rules_lookup", "connection_id", "tool_name", "agent_id"),
    )

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False
    )
    connection_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("tool_connections.id", ondelete="CASCADE"), nullable=False
    )
    tool_name: Mapped[str] = mapped_column(String(200), nullable=False)
    # The tool's definition digest when the rule was made: a rule never covers a definition nobody saw.
    definition_digest: Mapped[str] = mapped_column(String(64), nullable=False)
    agent_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("agents.id", ondelete="CASCADE"), nullable=False
    )
    scope: Mapped[str] = mapped_column(String(20), nullable=False)
    issue_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, ForeignKey("issues.id", ondelete="CASCADE"))
    # Set when the rule covers only the card's argument values: their canonical digest, and the redacted values
    # as the card showed them (for the connection's page).
    arguments_digest: Mapped[str | None] = mapped_column(String(64))
    arguments: Mapped[dict | None] = mapped_column(NullableJSONType)
    expires_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    remaining_uses: Mapped[int | None] = mapped_column(Integer)
    uses: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    created_by_user_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="SET NULL")
    )
    source_interaction_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("thread_interactions.id", ondelete="SET NULL")
    )
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_by_user_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="SET NULL")
    )
    # Void: the tool's definition changed (`definition_changed`) or the tool disappeared (`tool_removed`).
    voided_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    void_reason: Mapped[str | None] = mapped_column(String(40))

    created_by: Mapped[User | None] = relationship(foreign_keys=[created_by_user_id], lazy="joined")
    revoked_by: Mapped[User | None] = relationship(foreign_keys=[revoked_by_user_id], lazy="joined")
