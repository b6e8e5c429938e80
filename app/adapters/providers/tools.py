"""What a provider offers: its tools (write verbs, version hashes) and where the key goes (headers, query)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import mcp_types

# Connecting should never take long; a slow provider may still take its time to answer.
CONNECT_TIMEOUT_CAP = 5.0
MAX_TOOL_PAGES = 50

# First word of a tool name that marks it as changing something at the provider (used only when the tool has no
# readOnlyHint/destructiveHint annotations). Erring towards "write" is the safe side: write tools get stricter policy.
_WRITE_VERB_WORDS = """
    add append archive assign book cancel charge clear close comment create delete destroy disable drop edit enable
    execute import insert invite merge modify move pay post publish purge put patch refund remove rename reopen replace
    reply reset revoke run save schedule send set share start stop submit subscribe transfer trigger unsubscribe update
    upload upsert write
"""
WRITE_VERBS = frozenset(_WRITE_VERB_WORDS.split())

# Headers the MCP transport owns; a key placement must not override them.
_RESERVED_HEADERS = frozenset(
    {"accept", "content-type", "content-length", "host", "mcp-session-id", "mcp-protocol-version"}
)


# -- results and errors ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProviderTool:
    """One tool as the provider describes it, plus what Switchboard derives from it."""

    name: str
    description: str
    input_schema: dict
    is_write: bool
    version_hash: str
    # What the gateway's listing passes through as the provider said it (see `LISTING_FIELDS`).
    listing: dict | None = None


# Tool fields the gateway's `tools/list` passes through unchanged (the input schema is projected separately).
LISTING_FIELDS = ("title", "outputSchema", "annotations", "_meta")


# -- tools -------------------------------------------------------------------------------------------------------


def tool_is_write(name: str, annotations: Mapping[str, Any] | None) -> bool:
    """Whether a tool changes something: readOnlyHint decides, else destructiveHint=true, else the name's verb."""
    annotations = annotations or {}
    read_only = annotations.get("readOnlyHint")
    if read_only is not None:
        return not read_only
    if annotations.get("destructiveHint") is True:
        return True
    return _first_word(name) in WRITE_VERBS


def _first_word(name: str) -> str:
    # "notes.create_note" / "github/createIssue" / "Save-Memory" -> create / create / save
    last_segment = re.split(r"[./:]", name)[-1]
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", last_segment)
    words = [word for word in re.split(r"[^A-Za-z0-9]+", spaced) if word]
    return words[0].lower() if words else ""


def tool_version_hash(name: str, description: str, input_schema: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical JSON of {name, description, inputSchema}: changes when the provider's tool does."""
    canonical = json.dumps(
        {"name": name, "description": description, "inputSchema": input_schema},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _provider_tool(tool: mcp_types.Tool) -> ProviderTool:
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
    description = tool.description or ""
    input_schema = dict(tool.input_schema)
    dumped = tool.model_dump(mode="json", by_alias=True, exclude_none=True)
    listing = {key: dumped[key] for key in LISTING_FIELDS if key in dumped}
    return ProviderTool(
        name=tool.name,
        description=description,
        input_schema=input_schema,
        is_write=tool_is_write(tool.name, annotations),
        version_hash=tool_version_hash(tool.name, description, input_schema),
        listing=listing or None,
    )


# -- where the key goes ------------------------------------------------------------------------------------------


def headers_for_key(
    key_placement: Mapping[str, Any], secret_value: str
) -> tuple[dict[str, str], dict[str, str]]:
    """Build (headers, query_params) that carry an API key as the app definition's key placement says.

    `key_placement` is `{"location": "header" | "query", "name": ..., "prefix": ...}`; `name` defaults to
    "Authorization" for headers, and `prefix` (e.g. "Bearer") is joined to the secret with one space unless it is
    empty or already ends in whitespace. For query placement, append the params with `url_with_query`.
    """
    location = key_placement.get("location", "header")
    secret = secret_value.strip()
    if not secret:
        raise ValueError("The API key is empty.")
    if any(ch in secret for ch in "\r\n\0"):
        raise ValueError("The API key contains a line break or NUL character.")
    prefix = key_placement.get("prefix") or ""
    if prefix and not prefix[-1].isspace():
        prefix += " "
    value = f"{prefix}{secret}"
    if location == "header":
        name = key_placement.get("name") or "Authorization"
        if name.lower() in _RESERVED_HEADERS or not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", name):
            raise ValueError(f"{name!r} cannot carry an API key.")
        return {name: value}, {}
    if location == "query":
        name = key_placement.get("name")
        if not name:
            raise ValueError("A query key placement needs a parameter name.")
        return {}, {name: value}
    raise ValueError(f"Unknown key location {location!r}; expected 'header' or 'query'.")


def url_with_query(url: str, params: Mapping[str, str]) -> str:
    """Return `url` with `params` added to its query string (a param of the same name is replaced)."""
    if not params:
        return url
    parts = urlsplit(url)
    query = [
        (key, value) for key, value in parse_qsl(parts.query, keep_blank_values=True) if key not in params
    ]
    query.extend(params.items())
    return urlunsplit(parts._replace(query=urlencode(query)))
