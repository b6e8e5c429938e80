"""The provider's tools as indexed at setup: versions, write flags, search text, and each tool's stored entry.

A tool's gateway `tools/list` entry has a provider's side (input schema, title, outputSchema, annotations, `_meta`,
whether it writes), which changes only when the tool row does, so the row keeps it serialized
(`ConnectionTool.listed_entry`, written by the mapper events below on every ORM insert or update of a tool): the
entry's JSON text with an empty name and description and no managed argument (`stored_entry`). The gateway only
reads it: `app/services/gateway/listing.py` splices each agent's side (visible name, description note, managed
arguments) into that text.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from flask import current_app
from pydantic import ValidationError
from sqlalchemy import event, inspect, select
from sqlalchemy.engine import Connection
from sqlalchemy.orm import Mapper

from app.adapters.providers.tools import ProviderTool
from app.core import mcp_messages
from app.extensions import db
from app.models import (
    ConnectionTool,
    ToolConnection,
)
from app.models.base import utcnow
from app.services.connections import tool_definitions, trust_rules
from app.services.connections.settings import _set_policy

SEARCH_WORD = re.compile(r"[^\W_]+")


DESCRIPTION_CUT = "… [cut by Switchboard: {cut} more characters]"
NOTES_KEY = "toolIndexLimits"  # in connection.config: what the last indexing left out (shown on Permissions)


def _limit(name: str, default: int) -> int:
    try:
        return int(current_app.config.get(name, default))
    except RuntimeError:  # no app context (scripts): the defaults
        return default


def bounded_tools(tools: list[ProviderTool]) -> tuple[list[ProviderTool], dict[str, Any]]:
    """The tools the index keeps, within the limits (one provider cannot flood an agent's context), and what
    was left out or cut (empty: nothing).

    At most `PROVIDER_MAX_TOOLS` tools, in the provider's order (the listing stops paging past it); a tool whose
    input schema and listing fields come to more than `TOOL_SCHEMA_MAX_BYTES` of JSON is left out; a description
    longer than `TOOL_DESCRIPTION_MAX_CHARS` is cut, with a note saying how much."""
    max_tools = _limit("PROVIDER_MAX_TOOLS", 500)
    max_description = _limit("TOOL_DESCRIPTION_MAX_CHARS", 4000)
    max_schema = _limit("TOOL_SCHEMA_MAX_BYTES", 65536)
    kept: list[ProviderTool] = []
    too_large: list[str] = []
    cut: list[str] = []
    more = len(tools) > max_tools
    for tool in tools[:max_tools]:
        size = len(json.dumps(tool.input_schema or {})) + len(json.dumps(tool.listing or {}, default=str))
        if size > max_schema:
            too_large.append(tool.name)
            continue
        description = tool.description or ""
        if len(description) > max_description:
            left_out = len(description) - max_description
            description = description[:max_description] + DESCRIPTION_CUT.format(cut=f"{left_out:,}")
            tool = dataclasses.replace(tool, description=description)
            cut.append(tool.name)
        kept.append(tool)
    notes: dict[str, Any] = {}
    if more:
        notes["moreThan"] = max_tools
    if too_large:
        notes["tooLarge"] = too_large[:50]
        notes["tooLargeCount"] = len(too_large)
    if cut:
        notes["cutDescriptions"] = cut[:50]
        notes["cutDescriptionsCount"] = len(cut)
    if notes:
        notes.update(maxTools=max_tools, maxDescription=max_description, maxSchemaBytes=max_schema)
    return kept, notes


def index_limits_notes(connection: ToolConnection) -> list[str]:
    """What the last indexing left out, as sentences for the Permissions page."""
    notes = (connection.config or {}).get(NOTES_KEY) or {}
    lines = []
    if notes.get("moreThan"):
        lines.append(
            f"The provider offers more than {notes['moreThan']:,} tools; only the first {notes['moreThan']:,} "
            "were indexed. Agents cannot see or call the others."
        )
    if notes.get("tooLarge"):
        names = ", ".join(notes["tooLarge"])
        more = notes["tooLargeCount"] - len(notes["tooLarge"])
        lines.append(
            f"{notes['tooLargeCount']:,} tool(s) were left out because their input schema is larger than "
            f"{notes['maxSchemaBytes']:,} bytes: {names}{f' and {more:,} more' if more > 0 else ''}."
        )
    if notes.get("cutDescriptions"):
        names = ", ".join(notes["cutDescriptions"])
        more = notes["cutDescriptionsCount"] - len(notes["cutDescriptions"])
        lines.append(
            f"{notes['cutDescriptionsCount']:,} tool description(s) were cut to {notes['maxDescription']:,} "
            f"characters: {names}{f' and {more:,} more' if more > 0 else ''}."
        )
    return lines


def index_tools(connection: ToolConnection, tools: list[ProviderTool], *, first_index: bool) -> IndexChanges:
    """Upsert the stored tool index. On first index read tools are allowed and write tools ask first; tools a
    provider adds later get no policy row, which means ask first. Only what `bounded_tools` keeps is indexed; what
    it left out is kept in the connection's config for the Permissions page.

    After the first index every tool is pinned to its reviewed definition (a provider cannot change a tool
    quietly): a tool whose definition digest differs from the stored one is quarantined (not listed, not
    callable) with the provider's definition kept aside for review (`tool_review`), and its trust rules and
    open approvals are voided; a new tool whose input schema is that of a tool that disappeared is flagged as
    a rename and quarantined too; a removed tool disappears."""
    tools, limit_notes = bounded_tools(tools)
    config = dict(connection.config or {})
    if limit_notes:
        config[NOTES_KEY] = limit_notes
    else:
        config.pop(NOTES_KEY, None)
    if config != (connection.config or {}):
        connection.config = config
    existing = {
        t.name: t
        for t in db.session.scalars(
            select(ConnectionTool).where(ConnectionTool.connection_id == connection.id)
        )
    }
    listed = {tool.name for tool in tools}
    # Input schemas of tools gone from the listing: a new tool with one of them is probably one of them renamed.
    gone_schemas = {
        tool_definitions.schema_digest(row.input_schema): name
        for name, row in existing.items()
        if name not in listed and row.status != "quarantined"
    }
    changes = IndexChanges()
    now = utcnow()
    for tool in tools:
        row = existing.get(tool.name)
        digest = tool_definitions.definition_digest(
            tool.name, tool.description, tool.input_schema, tool.listing
        )
        if row is None:
            row = ConnectionTool(
                company_id=connection.company_id,
                connection_id=connection.id,
                name=tool.name,
                first_seen_at=now,
            )
            db.session.add(row)
            _take(row, tool)
            renamed_from = (
                None if first_index else gone_schemas.get(tool_definitions.schema_digest(tool.input_schema))
            )
            if renamed_from:
                row.status = "quarantined"
                row.pending_definition = _pending(tool, renamed_from)
                changes.renamed.append((renamed_from, tool.name))
            else:
                changes.added.append(tool.name)
        elif first_index or tool_definitions.reviewed_digest(row) == digest:
            _take(row, tool)
            row.pending_definition = None
        else:
            if (row.pending_definition or {}).get("digest") != digest:
                changes.quarantined.append(tool.name)
                trust_rules.void_for_tool(connection, tool.name, trust_rules.DEFINITION_CHANGED)
            row.status = "quarantined"
            row.pending_definition = _pending(tool, (row.pending_definition or {}).get("renamedFrom"))
        row.last_seen_at = now
        if first_index:
            _set_policy(connection, tool.name, "ask_first" if tool.is_write else "allow")
    for name, row in existing.items():
        if name not in listed and row.status != "removed":
            row.status = "removed"
            row.pending_definition = None
            changes.removed.append(name)
            trust_rules.void_for_tool(connection, name, trust_rules.TOOL_REMOVED)
    connection.tool_search_text = tool_search_text(tools)
    return changes


@dataclasses.dataclass
class IndexChanges:
    """What an indexing changed, by tool name (for activity and the refresh's message)."""

    added: list[str] = dataclasses.field(default_factory=list)
    quarantined: list[str] = dataclasses.field(default_factory=list)
    renamed: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    removed: list[str] = dataclasses.field(default_factory=list)


def _take(row: ConnectionTool, tool: ProviderTool) -> None:
    """The row serves this definition from now on (it is reviewed, or new with ask first)."""
    row.description = tool.description or ""
    row.input_schema = tool.input_schema or {}
    row.listing = getattr(tool, "listing", None)
    row.is_write = tool.is_write
    row.version_hash = tool.version_hash
    row.status = "active"


def _pending(tool: ProviderTool, renamed_from: str | None) -> dict:
    return tool_definitions.pending_of(
        tool.name,
        tool.description,
        tool.input_schema,
        tool.listing,
        tool.is_write,
        tool.version_hash,
        renamed_from=renamed_from,
    )


def accept_pending(row: ConnectionTool) -> None:
    """A person accepted the provider's definition of a quarantined tool: the row serves it from now on."""
    pending = row.pending_definition or {}
    row.description = pending.get("description", "")
    row.input_schema = pending.get("inputSchema") or {}
    row.listing = pending.get("listing")
    row.is_write = bool(pending.get("isWrite"))
    row.version_hash = pending.get("versionHash") or row.version_hash
    row.status = "active"
    row.pending_definition = None


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
