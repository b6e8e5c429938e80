"""Gateway call counters: the shared count behind rate limits and the loop breaker (`services.gateway.limits`).

One row per counted key (a scope and window, hashed), holding the calls counted in its current window. Kept in the
database, not in process memory, so every server process and worker counts the same calls, and a client's
re-`initialize` resets nothing. A window starts at the first call it counts and ends `expires_at` (epoch seconds);
the next call after that starts a new one. Expired rows of a connection are deleted when a run first calls it.
"""

from __future__ import annotations

import uuid

from sqlalchemy import ForeignKey, Index, Integer, String, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import Model


class GatewayCallCounter(Model):
    __tablename__ = "gateway_call_counters"
    __table_args__ = (Index("ix_gateway_call_counters_connection_expires", "connection_id", "expires_at"),)

    key: Mapped[str] = mapped_column(String(64), primary_key=True)
    connection_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("tool_connections.id", ondelete="CASCADE"), nullable=False
    )
    expires_at: Mapped[int] = mapped_column(Integer, nullable=False)
    count: Mapped[int] = mapped_column(Integer, nullable=False)
