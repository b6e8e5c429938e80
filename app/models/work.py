"""Projects, tasks (issues), and the task thread: comments plus typed interactions."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, String, Text, UniqueConstraint, Uuid, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.extensions import Model
from app.models.agents import Agent
from app.models.base import IdMixin, JSONType, NullableJSONType, TimestampMixin, ValueSet, one_of
from app.models.tenancy import User


class IssueStatus(ValueSet):
    TODO = "todo"
    IN_PROGRESS = "in_progress"
    IN_REVIEW = "in_review"
    BLOCKED = "blocked"
    DONE = "done"
    CANCELLED = "cancelled"


CLOSED_ISSUE_STATUSES = (IssueStatus.DONE, IssueStatus.CANCELLED)


class Project(IdMixin, TimestampMixin, Model):
    __tablename__ = "projects"

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False, index=True
    )
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    description: Mapped[str] = mapped_column(Text, nullable=False, default="")


class Issue(IdMixin, TimestampMixin, Model):
    __tablename__ = "issues"
    __table_args__ = (UniqueConstraint("company_id", "identifier"), one_of("status", IssueStatus))

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False, index=True
    )
    project_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, ForeignKey("projects.id", ondelete="SET NULL"))
    identifier: Mapped[str] = mapped_column(String(40), nullable=False)
    title: Mapped[str] = mapped_column(String(300), nullable=False)
    description: Mapped[str] = mapped_column(Text, nullable=False, default="")
    status: Mapped[str] = mapped_column(String(20), nullable=False, default="todo")
    assignee_agent_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("agents.id", ondelete="SET NULL"), index=True
    )
    responsible_user_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="SET NULL"), index=True
    )

    project: Mapped[Project | None] = relationship()
    assignee_agent: Mapped[Agent | None] = relationship()
    responsible_user: Mapped[User | None] = relationship()

    @property
    def is_closed(self) -> bool:
        return self.status in CLOSED_ISSUE_STATUSES


class Comment(IdMixin, TimestampMixin, Model):
    __tablename__ = "comments"

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False
    )
    issue_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("issues.id", ondelete="CASCADE"), nullable=False, index=True
    )
    author_user_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="SET NULL")
    )
    author_agent_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("agents.id", ondelete="SET NULL")
    )
    body: Mapped[str] = mapped_column(Text, nullable=False)

    author_user: Mapped[User | None] = relationship()
    author_agent: Mapped[Agent | None] = relationship()


class ThreadInteraction(IdMixin, TimestampMixin, Model):
    """A typed card in a task thread (connection intents, approvals) answered by an addressed person."""

    __tablename__ = "thread_interactions"
    __table_args__ = (
        # One pending card per idempotency key on a task: the database, not only the service, enforces it.
        Index(
            "uq_thread_interactions_pending_idempotency",
            "company_id",
            "issue_id",
            "idempotency_key",
            unique=True,
            sqlite_where=text("status = 'pending' AND idempotency_key IS NOT NULL"),
            postgresql_where=text("status = 'pending' AND idempotency_key IS NOT NULL"),
        ),
    )

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False
    )
    issue_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("issues.id", ondelete="CASCADE"), nullable=False, index=True
    )
    kind: Mapped[str] = mapped_column(String(40), nullable=False)
    status: Mapped[str] = mapped_column(String(20), nullable=False, default="pending")
    title: Mapped[str] = mapped_column(String(300), nullable=False, default="")
    summary: Mapped[str] = mapped_column(Text, nullable=False, default="")
    payload: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
    result: Mapped[dict | None] = mapped_column(NullableJSONType)
    idempotency_key: Mapped[str | None] = mapped_column(String(300))
    addressee_user_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="SET NULL"), index=True
    )
    requesting_agent_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("agents.id", ondelete="SET NULL")
    )
    source_run_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("heartbeat_runs.id", ondelete="SET NULL")
    )
    resolved_by_user_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="SET NULL")
    )
    resolved_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    addressee_user: Mapped[User | None] = relationship(foreign_keys=[addressee_user_id])
    resolved_by_user: Mapped[User | None] = relationship(foreign_keys=[resolved_by_user_id])
    requesting_agent: Mapped[Agent | None] = relationship()
