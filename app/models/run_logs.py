"""What a run left behind (bounded output, the session it reported) and the agent's session per task.

`RunLog` keeps the tail of a process run's stdout/stderr or an HTTP run's response body, bounded by
`RUN_LOG_LIMIT` characters each, so a chatty agent cannot fill the database. `AgentTaskSession` remembers the adapter
session an agent reported on a task together with the instruction-snapshot digest of the turn that created it: a
later turn resumes it only while the digest is unchanged and the turn is not a continuation.
"""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import Boolean, DateTime, ForeignKey, Integer, String, Text, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import Model
from app.models.base import IdMixin, NullableJSONType, TimestampMixin, utcnow

RUN_LOG_LIMIT = 64 * 1024


class RunLog(Model):
    __tablename__ = "run_logs"

    run_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("heartbeat_runs.id", ondelete="CASCADE"), primary_key=True
    )
    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False, index=True
    )
    adapter_type: Mapped[str] = mapped_column(String(20), nullable=False)
    exit_code: Mapped[int | None] = mapped_column(Integer)
    http_status: Mapped[int | None] = mapped_column(Integer)
    stdout: Mapped[str] = mapped_column(Text, nullable=False, default="")
    stderr: Mapped[str] = mapped_column(Text, nullable=False, default="")
    truncated: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    timed_out: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    # The session the turn resumed (None: fresh) and the one the adapter reported back.
    resumed_session_id: Mapped[str | None] = mapped_column(String(300))
    session_id: Mapped[str | None] = mapped_column(String(300))
    instructions_digest: Mapped[str | None] = mapped_column(String(64))
    # What an agent CLI reported in its machine-readable output (`app.adapters.agents`): a bounded list of
    # normalized events (session, tool calls, messages, result) and the turn's summary (final message, tool calls,
    # usage, cost). Never arguments, results or secrets.
    events: Mapped[list | None] = mapped_column(NullableJSONType)
    summary: Mapped[dict | None] = mapped_column(NullableJSONType)
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)


class AgentTaskSession(IdMixin, TimestampMixin, Model):
    __tablename__ = "agent_task_sessions"
    __table_args__ = (UniqueConstraint("agent_id", "issue_id"),)

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False
    )
    agent_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("agents.id", ondelete="CASCADE"), nullable=False
    )
    issue_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("issues.id", ondelete="CASCADE"), nullable=False, index=True
    )
    session_id: Mapped[str | None] = mapped_column(String(300))
    instructions_digest: Mapped[str | None] = mapped_column(String(64))
    last_run_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("heartbeat_runs.id", ondelete="SET NULL")
    )
