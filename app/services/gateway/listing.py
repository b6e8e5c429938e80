"""The gateway's `tools/list` entries, and the listing of a run as JSON text built from each tool's stored entry.

A tool's entry (`tool_definition`) has a provider's side (input schema, title, outputSchema, annotations, `_meta`,
whether it writes) and an agent's side (the visible name; the connection's name and the tool's action, in the
description; managed arguments, out of the input schema). The provider's side changes only when the tool row does,
so the row keeps it serialized (`ConnectionTool.listed_entry`, written by the connections service when a tool row is
inserted or updated through the ORM: `app/services/connections/tool_index.py`): the entry's JSON text with an empty
name and description. This module only reads it: a rebuild of a listing of thousands of tools splices each name and
description into that text, instead of decoding the stored schemas and validating a message model per tool. Tools
whose schema managed arguments change, and rows with no stored entry in the current format (written without the
ORM, or before `ENTRY_FORMAT` changed), take the full path. Both write the same keys and values, and a spliced entry
is the text the full path writes from the values the row was stored with
(tests/services/gateway/test_listing_entries.py); PostgreSQL's JSONB does not keep object keys in order, so there a
schema read back (the full path) may list its keys in another order than the stored entry, which keeps the
provider's.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from json.encoder import encode_basestring_ascii
from typing import Any

from sqlalchemy import case, func, not_, or_, select

from app.catalog.loader import get_apps
from app.core.mcp_messages import tool
from app.extensions import db
from app.models import ConnectionTool, HeartbeatRun, ToolPolicy
from app.services.access.effective import (
    DEFAULT_TOOL_ACTION,
    policy_of_tool,
    usable_connections,
    within_scope_action,
)
from app.services.access.eligible import eligible_access
from app.services.connections.tool_index import STORED_HEAD, provider_fields
from app.services.gateway.arguments import managed_for_schema, pinned_arguments, project_schema
from app.services.gateway.names import NAME_SEPARATOR, connection_slugs, tool_name_budget, visible_names

# The description: the provider's, a paragraph, then the note ("Tool <name> of the connection <name>." and, for
# ask_first, ASK_FIRST_NOTE).
PARAGRAPH = "\n\n"
NOTE_HEAD = "Tool "
ASK_FIRST_NOTE = " Each call needs approval by the task's responsible person before it runs."
# Inside a JSON string every `"` is escaped, so this text can only be the description's key and value: the keys
# before it are `name` and `title`, whose values are strings.
_EMPTY_DESCRIPTION = '"description": ""'


# --- one entry -----------------------------------------------------------------------------------------------------


def listed_description(description: str | None, tool_name: str, connection_name: str, action: str) -> str:
    """The provider's description, then which connection the tool is of and, for ask_first, that calls wait."""
    description = (description or "").strip()
    note = f"{NOTE_HEAD}{tool_name}{_note_tail(connection_name, action)}"
    return f"{description}{PARAGRAPH}{note}" if description else note


def _note_tail(connection_name: str, action: str) -> str:
    """What the description's note says after the tool's name (the same for every tool of the connection)."""
    tail = f" of the connection {connection_name}."
    return tail + ASK_FIRST_NOTE if action == "ask_first" else tail


def tool_definition(
    name: str,
    tool_name: str,
    description: str | None,
    input_schema: dict | None,
    is_write: bool,
    connection_name: str,
    action: str,
    managed: dict[str, Any],
    listing: dict | None = None,
) -> dict:
    """A tool's `tools/list` entry, as the agent sees it (the one place that shapes it). The provider's `title`,
    `outputSchema`, annotations and `_meta` pass through; managed arguments leave the input schema only."""
    return tool(
        name,
        listed_description(description, tool_name, connection_name, action),
        project_schema(input_schema, managed),
        **provider_fields(is_write, listing),
    )


def _escaped(text: str) -> str:
    """`json.dumps(text)` without its quotes. Escaping is character by character, so the JSON string of a
    concatenation is the concatenation of its parts' escapes: shared parts are escaped once per connection."""
    return encode_basestring_ascii(text)[1:-1]


_ESCAPED_PARAGRAPH_NOTE_HEAD = _escaped(PARAGRAPH + NOTE_HEAD)
_ESCAPED_NOTE_HEAD = _escaped(NOTE_HEAD)
_STORED_HEAD_LENGTH = len(STORED_HEAD)
_EMPTY_DESCRIPTION_LENGTH = len(_EMPTY_DESCRIPTION)


@dataclass
class _ConnectionEntries:
    """Writes the entries of one connection's tools from their stored entries (`spliced`)."""

    slug: str
    connection_name: str
    pinned: dict[str, Any]
    scope: dict[str, str] | None
    # `_note_tail` per action, escaped, with the description's closing quote.
    note_tails: dict[str, str] = field(default_factory=dict)
    # The entry's opening up to its name, then the slug and separator a visible name starts with, escaped.
    name_head: str = ""

    def __post_init__(self) -> None:
        self.name_head = '{"name": "' + _escaped(self.slug + NAME_SEPARATOR)

    def spliced(self, stored: str, name: str, tool_name: str, description: str, action: str) -> str:
        """`json.dumps(tool_definition(...))` of a tool without managed arguments whose stored entry is in the
        current format (`_tool_rows` tells). Keys stay in the message model's order (name, title, description...)."""
        at = stored.find(_EMPTY_DESCRIPTION, _STORED_HEAD_LENGTH)
        if at < 0 or not stored.startswith(STORED_HEAD):
            # Only a writer that bypasses the ORM could store this; listing the tool without it would list it wrong.
            raise ValueError("A stored tool entry is not in the current format.")
        tail = self.note_tails.get(action)
        if tail is None:
            tail = self.note_tails[action] = _escaped(_note_tail(self.connection_name, action)) + '"'
        description = (description or "").strip()
        escaped_tool_name = _escaped(tool_name)
        # A visible name is the slug, the separator and the tool's name unless it had to be changed (`names`).
        plain_name = len(name) == len(self.slug) + len(NAME_SEPARATOR) + len(tool_name) and name.endswith(
            tool_name
        )
        return "".join(
            (
                self.name_head + escaped_tool_name if plain_name else '{"name": "' + _escaped(name),
                '"',
                stored[_STORED_HEAD_LENGTH:at],
                '"description": "',
                _escaped(description) + _ESCAPED_PARAGRAPH_NOTE_HEAD if description else _ESCAPED_NOTE_HEAD,
                escaped_tool_name,
                tail,
                stored[at + _EMPTY_DESCRIPTION_LENGTH :],
            )
        )


# --- the listing of a run ------------------------------------------------------------------------------------------


def build_listing(run: HeartbeatRun, budget: int | None = None, pinned: list[str] | None = None) -> str:
    """`json.dumps([tool.definition() for tool in tools.tool_map(run, budget).values()])`, from plain rows and stored
    text (`budget` None: the `GATEWAY_TOOL_NAME_BUDGET` setting).

    The same decisions in the same order (connections by id, tools by name): the usable connections from tool
    counts, then the tools of those connections as plain rows with their action and stored entry, pinned arguments
    worked out once per connection, names given per connection among the tools the agent reaches there (blocked
    ones included, as the tool map names them). A constant number of statements (one for the tools).
    `pinned`, when given, receives the entries (their JSON text) of the tools pinned to be listed by themselves.
    """
    budget = budget or tool_name_budget(None)
    usable = usable_connections(eligible_access(run.company_id, run.agent_id, run.responsible_user_id))
    usable = [access for access in usable if access.has_tools]
    if not usable:
        return "[]"
    slugs = connection_slugs([a.connection for a in usable], budget)
    apps = get_apps(a.connection.app_slug for a in usable)
    connections = {
        a.connection.id: _ConnectionEntries(
            slugs[a.connection.id],
            a.connection.name,
            pinned_arguments(a.connection, apps.get(a.connection.app_slug)),
            a.tool_scope,
        )
        for a in usable
    }
    pinned_ids = [connection_id for connection_id, c in connections.items() if c.pinned]
    entries: list[str] = []
    for connection, rows in _by_connection(_tool_rows(list(connections), pinned_ids), connections):
        names = visible_names(connection.slug, (row[1] for row, _ in rows), budget)
        for (
            _connection_id,
            tool_name,
            description,
            stored,
            full_path,
            input_schema,
            is_write,
            listing,
            is_pinned,
            _policy,
        ), action in rows:
            if action == "block":
                continue
            name = names[tool_name]
            if not full_path:
                entries.append(connection.spliced(stored, name, tool_name, description, action))
                if is_pinned and pinned is not None:
                    pinned.append(entries[-1])
                continue
            definition = tool_definition(
                name,
                tool_name,
                description,
                input_schema,
                is_write,
                connection.connection_name,
                action,
                managed_for_schema(connection.pinned, input_schema),
                listing,
            )
            entries.append(json.dumps(definition))
            if is_pinned and pinned is not None:
                pinned.append(entries[-1])
    return "[" + ", ".join(entries) + "]"


def _by_connection(
    rows: list, connections: dict[uuid.UUID, _ConnectionEntries]
) -> list[tuple[_ConnectionEntries, list[tuple[Any, str]]]]:
    """The rows of each connection (they come by connection) with their action under the connection's access card
    scope, as `effective_access` decides it; tools the scope leaves out are dropped."""
    groups: list[tuple[_ConnectionEntries, list[tuple[Any, str]]]] = []
    # The connection is looked up when it changes (UUIDs hash and compare in Python).
    current: int | None = None
    group: list[tuple[Any, str]] = []
    scope: dict[str, str] | None = None
    for row in rows:
        connection_id = row[0]
        if connection_id.int != current:
            current, connection = connection_id.int, connections[connection_id]
            group, scope = [], connection.scope
            groups.append((connection, group))
        action = row[-1] if scope is None else within_scope_action(scope, row[1], row[-1])
        if action is not None:
            group.append((row, action))
    return groups


def _tool_rows(connection_ids: list[uuid.UUID], pinned_ids: list[uuid.UUID]) -> list:
    """The active tools of the connections with their action (no policy row: ask first), by connection and name.

    The decoded `input_schema`, `is_write` and `listing` come only for the tools that take the full path
    (`full_path`: of a connection that pins arguments, or with no stored entry in the current format); the others
    read as None and are written from their stored entry.
    """
    full_path = or_(
        ConnectionTool.connection_id.in_(pinned_ids),
        ConnectionTool.listed_entry.is_(None),
        not_(ConnectionTool.listed_entry.startswith(STORED_HEAD, autoescape=True)),
    )
    return list(
        db.session.execute(
            select(
                ConnectionTool.connection_id,
                ConnectionTool.name,
                ConnectionTool.description,
                ConnectionTool.listed_entry,
                full_path.label("full_path"),
                case((full_path, ConnectionTool.input_schema)).label("input_schema"),
                case((full_path, ConnectionTool.is_write)).label("is_write"),
                case((full_path, ConnectionTool.listing)).label("listing"),
                func.coalesce(ToolPolicy.pinned, False).label("pinned"),
                func.coalesce(ToolPolicy.action, DEFAULT_TOOL_ACTION).label("action"),
            )
            .outerjoin(
                ToolPolicy,
                policy_of_tool(),
            )
            .where(ConnectionTool.connection_id.in_(connection_ids), ConnectionTool.status == "active")
            .order_by(ConnectionTool.connection_id, ConnectionTool.name)
        )
    )
