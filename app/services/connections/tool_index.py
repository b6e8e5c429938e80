"""The provider's tools as indexed at setup: versions, write flags and search text."""

from __future__ import annotations

import re

from sqlalchemy import select

from app.extensions import db
from app.models import (
    ConnectionTool,
    ToolConnection,
)
from app.models.base import utcnow
from app.services.connections.provider_tools import ProviderTool
from app.services.connections.settings import _set_policy

SEARCH_WORD = re.compile(r"[^\W_]+")


def index_tools(connection: ToolConnection, tools: list[ProviderTool], *, first_index: bool) -> None:
    """Upsert the stored tool index. On first index read tools are allowed and write tools ask first; tools a
    provider adds later get no policy row, which means ask first."""
    existing = {
        t.name: t
        for t in db.session.scalars(
            select(ConnectionTool).where(ConnectionTool.connection_id == connection.id)
        )
    }
    now = utcnow()
    seen = set()
    for tool in tools:
        seen.add(tool.name)
        row = existing.get(tool.name)
        if row is None:
            row = ConnectionTool(
                company_id=connection.company_id,
                connection_id=connection.id,
                name=tool.name,
                first_seen_at=now,
            )
            db.session.add(row)
        row.description = tool.description or ""
        row.input_schema = tool.input_schema or {}
        row.listing = getattr(tool, "listing", None)
        row.is_write = tool.is_write
        row.version_hash = tool.version_hash
        row.status = "active"
        row.last_seen_at = now
        if first_index:
            _set_policy(connection, tool.name, "ask_first" if tool.is_write else "allow")
    for name, row in existing.items():
        if name not in seen:
            row.status = "removed"
    connection.tool_search_text = tool_search_text(tools)


def tool_search_text(tools: list[ProviderTool]) -> str:
    """The distinct lowercase words of the tools' names and descriptions (what search matches query words in)."""
    words: set[str] = set()
    for tool in tools:
        words.update(SEARCH_WORD.findall(f"{tool.name} {tool.description or ''}".lower()))
    return " ".join(sorted(words))
