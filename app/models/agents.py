"""Agents: the AI workers a company runs, and how a run reaches them."""

from __future__ import annotations

import uuid

from sqlalchemy import ForeignKey, String, Text, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import Model
from app.models.base import IdMixin, JSONType, TimestampMixin, ValueSet, one_of


class AdapterType(ValueSet):
    PROCESS = "process"
    HTTP = "http"
    CLAUDE_CODE = "claude_code"
    CODEX = "codex"
    GEMINI = "gemini"
    MANUAL = "manual"


class AgentStatus(ValueSet):
    ACTIVE = "active"
    PAUSED = "paused"
    ARCHIVED = "archived"


class Agent(IdMixin, TimestampMixin, Model):
    __tablename__ = "agents"
    __table_args__ = (one_of("adapter_type", AdapterType), one_of("status", AgentStatus))

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False, index=True
    )
    name: Mapped[str] = mapped_column(String(120), nullable=False)
    title: Mapped[str] = mapped_column(String(200), nullable=False, default="")
    instructions: Mapped[str] = mapped_column(Text, nullable=False, default="")
    adapter_type: Mapped[str] = mapped_column(String(20), nullable=False, default="manual")
    adapter_config: Mapped[dict] = mapped_column(JSONType, nullable=False, default=dict)
    status: Mapped[str] = mapped_column(String(20), nullable=False, default="active")


class AgentSecret(IdMixin, TimestampMixin, Model):
    """An environment variable handed only to this agent's runs (a model API key, for example): the value is
    encrypted at rest (`app.services.secrets_box`), write-only in every page and API, and never logged."""

    __tablename__ = "agent_secrets"
    __table_args__ = (UniqueConstraint("agent_id", "name"),)

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False, index=True
    )
    agent_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("agents.id", ondelete="CASCADE"), nullable=False
    )
    name: Mapped[str] = mapped_column(String(120), nullable=False)
    ciphertext: Mapped[str] = mapped_column(Text, nullable=False)
