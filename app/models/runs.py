"""Heartbeat runs (one execution turn of an agent on a task) and the wakeup requests that start them."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import DateTime, ForeignKey, Index, String, Text, Uuid, text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.extensions import Model
from app.models.agents import Agent
from app.models.base import IdMixin, JSONType, TimestampMixin, ValueSet, one_of, utcnow
from app.models.keys import CONNECTION_INTENT_KEY_PREFIX


class RunStatus(ValueSet):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"


ACTIVE_RUN_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING)


class WakeupStatus(ValueSet):
    QUEUED = "queued"
    CLAIMED = "claimed"
    FINISHED = "finished"
    SKIPPED = "skipped"
    FAILED = "failed"
    CANCELLED = "cancelled"


class HeartbeatRun(IdMixin, TimestampMixin, Model):
    __tablename__ = "heartbeat_runs"
    __table_args__ = (one_of("status", RunStatus),)

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False, index=True
    )
    agent_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("agents.id", ondelete="CASCADE"), nullable=False, index=True
    )
    issue_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("issues.id", ondelete="SET NULL"), index=True
    )
    responsible_user_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="SET NULL")
    )
    # Set when the task changed responsible person during the run: whom its token was minted for.
    handed_over_from_user_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="SET NULL")
    )
    status: Mapped[str] = mapped_column(String(20), nullable=False, default="queued")
    invocation_source: Mapped[str] = mapped_column(String(40), nullable=False, default="manual")
    context_snapshot: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
    error: Mapped[str | None] = mapped_column(Text)
    started_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    agent: Mapped[Agent] = relationship()


_LIVE_CONTINUATION_WAKE = f"idempotency_key LIKE '{CONNECTION_INTENT_KEY_PREFIX}%' AND status NOT IN ('skipped', 'failed', 'cancelled')"


class WakeupRequest(IdMixin, TimestampMixin, Model):
    __tablename__ = "wakeup_requests"
    __table_args__ = (
        # Exactly-once continuation wakes: a live wake for a connection-intent key can exist only once.
        Index(
            "uq_wakeup_requests_connection_intent_idempotency",
            "company_id",
            "idempotency_key",
            unique=True,
            sqlite_where=text(_LIVE_CONTINUATION_WAKE),
            postgresql_where=text(_LIVE_CONTINUATION_WAKE),
        ),
        one_of("status", WakeupStatus),
    )

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False
    )
    agent_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("agents.id", ondelete="CASCADE"), nullable=False, index=True
    )
    issue_id: Mapped[uuid.UUID | None] = mapped_column(Uuid, ForeignKey("issues.id", ondelete="SET NULL"))
    source: Mapped[str] = mapped_column(String(40), nullable=False)
    reason: Mapped[str] = mapped_column(String(300), nullable=False, default="")
    payload: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
    idempotency_key: Mapped[str | None] = mapped_column(String(300))
    status: Mapped[str] = mapped_column(String(20), nullable=False, default="queued")
    run_id: Mapped[uuid.UUID | None] = mapped_column(
        Uuid, ForeignKey("heartbeat_runs.id", ondelete="SET NULL")
    )


class GatewayCancellation(IdMixin, Model):
    """An agent's `notifications/cancelled` for a gateway call, kept for the server process that runs the call.

    A cancellation may land in another server process than the call it names (gunicorn runs several); that process
    records it here and the call's process, which polls while the provider works, cancels it. Keyed by the run and
    the agent's JSON-RPC request id (`request_key`: its JSON text, hashed when long); a row only counts for a call
    that started before it was written (plus a little slack), so a request id reused later is not cancelled by an old
    row. Rows are deleted after an hour (`app.services.gateway.cancellation`).
    """

    __tablename__ = "gateway_cancellations"
    __table_args__ = (Index("ix_gateway_cancellations_run_request", "run_id", "request_key"),)

    run_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("heartbeat_runs.id", ondelete="CASCADE"), nullable=False
    )
    request_key: Mapped[str] = mapped_column(String(200), nullable=False)
    created_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, nullable=False, index=True
    )
