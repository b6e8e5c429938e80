"""Visible tool names: `<connection slug>__<tool>` within the calling agent's budget (the rule is in the package
docstring). The one owner of the rule: the tool map (`tools`), the listing (`listing`) and elicitation all name
tools, and resolve names, through this module.

Model APIs refuse a request whose tool names do not match `MODEL_NAME_PATTERN` (Anthropic's and OpenAI's:
`^[a-zA-Z0-9_-]{1,64}$`), and agent CLIs put their own prefix before every MCP tool's name. So each listing is built
for a budget: the longest visible name the caller's client can take after its prefix (`tool_name_budget`).
"""

from __future__ import annotations

import hashlib
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Protocol

from flask import current_app

NAME_SEPARATOR = "__"
SLUG_MAX_LENGTH = 32
# The largest budget: MCP's own advice for a tool name (1 to 128 characters, 2025-11-25 "Tool names").
NAME_MAX_LENGTH = 128
# The smallest budget: a slug of at least 11 characters and a tool part of at least 11 (2 of the tool's name and
# a hash suffix, when it has to be shortened).
NAME_MIN_LENGTH = 24
HASH_LENGTH = 8
_SUFFIX_LENGTH = 1 + HASH_LENGTH  # `-` and the hash

# What Anthropic's and OpenAI's APIs accept as a tool name (the whole request is refused otherwise).
MODEL_NAME_PATTERN = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
_NOT_IN_NAMES = re.compile(r"[^a-zA-Z0-9_-]")
_NOT_IN_SLUGS = re.compile(r"[^a-z0-9]+")

# The key under which Switchboard's agent adapters register the gateway with the agent's CLI.
GATEWAY_SERVER_KEY = "gateway"

# Per adapter type: what its CLI puts before the name of a tool of the MCP server `gateway`, and the longest name
# (prefix included) the CLI passes to the model unchanged.
# - Claude Code: `mcp__<server>__<tool>`, sent as is (the API refuses a name over 64).
# - Codex (codex-rs `mcp_connection_manager`): `mcp__<server>__<tool>`; a longer name is replaced by one ending in a
#   SHA-1, which the model would then call instead of the listed name.
# - Gemini CLI (`generateValidName` in packages/core/src/tools/mcp-tool.ts): `mcp_<server>_<tool>`, characters
#   outside `[a-zA-Z0-9_.:-]` turned into `_`, and a name over 63 characters cut to its first and last 30 around
#   `...`.
# - OpenCode (`MCP.tools` in packages/opencode/src/mcp/index.ts): `<server>_<tool>`, characters outside
#   `[a-zA-Z0-9_-]` turned into `_`.
CLIENT_PREFIXES: dict[str, tuple[str, int]] = {
    "claude_code": (f"mcp__{GATEWAY_SERVER_KEY}__", 64),
    "codex": (f"mcp__{GATEWAY_SERVER_KEY}__", 64),
    "gemini": (f"mcp_{GATEWAY_SERVER_KEY}_", 63),
    "opencode": (f"{GATEWAY_SERVER_KEY}_", 64),
}
ADAPTER_BUDGETS: dict[str, int] = {
    adapter: limit - len(prefix) for adapter, (prefix, limit) in CLIENT_PREFIXES.items()
}
# For every other caller (process, http and manual agents, external clients): `GATEWAY_TOOL_NAME_BUDGET`, by default
# the smallest of the budgets above, so a CLI of any of those kinds started by a `process` agent with the gateway
# registered as `gateway` accepts every name.
DEFAULT_BUDGET = min(ADAPTER_BUDGETS.values())


def checked_budget(value: object) -> int:
    """A budget setting as a number, or a ValueError that says what is wrong."""
    try:
        budget = int(str(value).strip())
    except ValueError:
        raise ValueError(f"expected a whole number of characters, got {value!r}") from None
    if not NAME_MIN_LENGTH <= budget <= NAME_MAX_LENGTH:
        raise ValueError(f"expected {NAME_MIN_LENGTH} to {NAME_MAX_LENGTH} characters, got {budget}")
    return budget


def tool_name_budget(adapter_type: str | None) -> int:
    """The longest visible name an agent of this adapter type may be shown: its CLI's (`ADAPTER_BUDGETS`), else
    the `GATEWAY_TOOL_NAME_BUDGET` setting."""
    budget = ADAPTER_BUDGETS.get(adapter_type or "")
    if budget is not None:
        return budget
    return checked_budget(current_app.config.get("GATEWAY_TOOL_NAME_BUDGET", DEFAULT_BUDGET))


# --- connection slugs ----------------------------------------------------------------------------------------------


def slug_max_length(budget: int) -> int:
    """A slug takes at most half of the budget after the separator (and never more than `SLUG_MAX_LENGTH`)."""
    return min(SLUG_MAX_LENGTH, (budget - len(NAME_SEPARATOR)) // 2)


def connection_slug(name: str, budget: int = NAME_MAX_LENGTH) -> str:
    """The stable, name-safe slug of a connection name (see the package docstring)."""
    slug = _NOT_IN_SLUGS.sub("-", (name or "").lower()).strip("-")
    slug = slug[: slug_max_length(budget)].rstrip("-")
    return slug or "connection"


def _suffixed_slug(slug: str, connection_id: uuid.UUID, budget: int, hex_length: int) -> str:
    """`slug` shortened to make room for `-` and the first `hex_length` hex of the connection's id."""
    room = slug_max_length(budget)
    if hex_length + 1 >= room:
        return connection_id.hex[:room]
    head = slug[: room - hex_length - 1].rstrip("-")
    return f"{head}-{connection_id.hex[:hex_length]}" if head else connection_id.hex[:hex_length]


_SUFFIX_HEX_LENGTHS = (8, 16, 32)


class NamedConnection(Protocol):
    """What slugs read of a connection: a `ToolConnection` or a plain `ConnectionRow`."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def name(self) -> str: ...


def connection_slugs(connections: Sequence[NamedConnection], budget: int) -> dict[uuid.UUID, str]:
    """Each connection's slug among these (the ones the agent sees): connections that share a slug get the id's
    first 8 hex (16, then 32, in the unlikely case that still clashes with another connection's slug)."""
    base = {c.id: connection_slug(c.name, budget) for c in connections}
    slugs = dict(base)
    for hex_length in _SUFFIX_HEX_LENGTHS:
        counts = Counter(slugs.values())
        clashing = [cid for cid, slug in slugs.items() if counts[slug] > 1]
        if not clashing:
            break
        for cid in clashing:
            slugs[cid] = _suffixed_slug(base[cid], cid, budget, hex_length)
    return slugs


def possible_slugs(connection: NamedConnection, budget: int) -> set[str]:
    """Every slug `connection_slugs` may give this connection, whichever connections are beside it."""
    base = connection_slug(connection.name, budget)
    return {base} | {_suffixed_slug(base, connection.id, budget, n) for n in _SUFFIX_HEX_LENGTHS}


def slug_of_name(visible: str) -> str:
    """The connection slug a visible name starts with (slugs have no `_`, so it ends at the first separator)."""
    return visible.split(NAME_SEPARATOR, 1)[0]


# --- tool names ----------------------------------------------------------------------------------------------------


def _hash(tool_name: str, salt: int) -> str:
    text = f"{salt}:{tool_name}" if salt else tool_name
    return hashlib.sha256(text.encode()).hexdigest()[:HASH_LENGTH]


def tool_part(tool_name: str, room: int, salt: int = 0) -> str:
    """The tool's part of a visible name, at most `room` characters: its name when that fits and has only
    `a-zA-Z0-9_-`; else the name with every other character turned into `_`, cut to leave room for `-` and 8 hex of
    a hash of the name (of `<salt>:<name>` when a collision needs another, `visible_names`)."""
    if not salt and len(tool_name) <= room and not _NOT_IN_NAMES.search(tool_name):
        return tool_name
    return _NOT_IN_NAMES.sub("_", tool_name)[: room - _SUFFIX_LENGTH] + "-" + _hash(tool_name, salt)


def visible_name(slug: str, tool_name: str, budget: int) -> str:
    """One tool's visible name when no other tool of its connection shortens to the same (`visible_names`)."""
    return slug + NAME_SEPARATOR + tool_part(tool_name, budget - len(slug) - len(NAME_SEPARATOR))


def visible_names(slug: str, tool_names: Iterable[str], budget: int) -> dict[str, str]:
    """The visible names of a connection's tools (the active tools the agent reaches, blocked ones included), by
    tool name. Distinct: a tool whose name is kept as is keeps it; tools whose changed names are the same take, in
    order of their names, the first salt (`tool_part`) that gives a name no other tool has."""
    room = budget - len(slug) - len(NAME_SEPARATOR)
    head = slug + NAME_SEPARATOR
    visible: dict[str, str] = {}
    changed = False
    for name in tool_names:
        if len(name) <= room and not _NOT_IN_NAMES.search(name):
            visible[name] = head + name
        else:
            visible[name] = head + tool_part(name, room)
            changed = True
    # Kept names are the tools' own, so distinct: only changed ones can meet another name.
    if changed and len(set(visible.values())) < len(visible):
        parts = _distinct({name: shown[len(head) :] for name, shown in visible.items()}, room)
        visible = {name: head + part for name, part in parts.items()}
    return visible


def _distinct(parts: dict[str, str], room: int) -> dict[str, str]:
    kept = {name: part for name, part in parts.items() if part == name}  # tool names are distinct
    taken = set(kept.values())
    for name in sorted(name for name in parts if name not in kept):
        part, salt = parts[name], 0
        while part in taken:
            salt += 1
            part = tool_part(name, room, salt)
        taken.add(part)
        kept[name] = part
    return {name: kept[name] for name in parts}
