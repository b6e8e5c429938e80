"""The provider's tools as indexed at setup: versions, write flags, search text, and each tool's stored entry.

A tool's gateway `tools/list` entry has a provider's side (input schema, title, outputSchema, annotations, `_meta`,
whether it writes), which changes only when the tool row does, so the row keeps it serialized
(`ConnectionTool.listed_entry`, written by the mapper events below on every ORM insert or update of a tool): the
entry's JSON text with an empty name and description and no managed argument (`stored_entry`). The gateway only
reads it: `app/services/gateway/listing.py` splices each agent's side (visible name, description note, managed
arguments) into that text.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import ValidationError
from sqlalchemy import event, inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Mapper

from app.core import mcp_messages
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


# --- the stored entry ----------------------------------------------------------------------------------------------

# Stored entries start with this; changing what an entry holds (the gateway's `tool_definition`) must change it, so that
# entries stored by older code are no longer spliced (they take the full path until the tools are indexed again).
ENTRY_FORMAT = "1:"
STORED_HEAD = ENTRY_FORMAT + '{"name": ""'


def provider_fields(is_write: bool, listing: dict | None) -> dict[str, Any]:
    """The entry's optional fields by wire name: the provider's `title`, `outputSchema`, `annotations`, `_meta`."""
    listing = listing or {}
    # readOnlyHint is always there, so agents can tell reads from writes without guessing from names (it agrees with
    # the provider's hint when it gave one).
    annotations = dict(listing.get("annotations") or {})
    annotations.setdefault("readOnlyHint", not is_write)
    passed_through = {key: listing[key] for key in ("title", "outputSchema", "_meta") if key in listing}
    return {"annotations": annotations, **passed_through}


def listed_schema(input_schema: dict | None) -> dict:
    """The input schema an entry lists before managed arguments are taken out (the gateway's `project_schema`):
    the provider's when it names a type (the same object), else a copy typed `object` (an empty object schema for
    none)."""
    if input_schema and "type" in input_schema:
        return input_schema
    schema = dict(input_schema or {}) or {"type": "object", "properties": {}}
    schema.setdefault("type", "object")
    return schema


def stored_entry(input_schema: dict | None, is_write: bool, listing: dict | None) -> str | None:
    """What a tool row keeps of its entry: `ENTRY_FORMAT`, then the entry's JSON text with an empty name and
    description and no managed argument. None when the provider's fields are not a valid tool (listing such a tool
    fails as it would have)."""
    try:
        entry = mcp_messages.tool("", "", listed_schema(input_schema), **provider_fields(is_write, listing))
    except ValidationError:
        return None
    return ENTRY_FORMAT + json.dumps(entry)


@event.listens_for(ConnectionTool, "before_insert")
def _store_entry_on_insert(mapper: Mapper, connection: Connection, row: ConnectionTool) -> None:
    row.listed_entry = stored_entry(row.input_schema, row.is_write, row.listing)


@event.listens_for(ConnectionTool, "before_update")
def _store_entry_on_update(mapper: Mapper, connection: Connection, row: ConnectionTool) -> None:
    attributes = inspect(row).attrs
    changed = any(attributes[key].history.has_changes() for key in ("input_schema", "is_write", "listing"))
    # A row stored without one, or in an older format, gets it the next time its tools are indexed.
    if changed or not (row.listed_entry or "").startswith(STORED_HEAD):
        row.listed_entry = stored_entry(row.input_schema, row.is_write, row.listing)
