"""A tool's definition digest and the readable diff a person reviews when a provider changes a tool.

The definition is what an agent and a person see of a tool: its name, description, input schema, output schema and
annotations. Its digest is the lowercase hex SHA-256 of that object's canonical JSON (keys sorted, no spaces). It
binds approvals and trust rules to the definition a person saw, and it is how indexing notices a changed tool.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass
from typing import Any

from app.models import ConnectionTool


def definition_of(name: str, description: str, input_schema: dict | None, listing: dict | None) -> dict:
    listing = listing or {}
    return {
        "name": name,
        "description": description or "",
        "inputSchema": input_schema or {},
        "outputSchema": listing.get("outputSchema"),
        "annotations": listing.get("annotations"),
    }


def definition_digest(name: str, description: str, input_schema: dict | None, listing: dict | None) -> str:
    canonical = json.dumps(
        definition_of(name, description, input_schema, listing),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def reviewed_digest(row: ConnectionTool) -> str:
    """The digest of the definition a person accepted (what the gateway serves)."""
    return definition_digest(row.name, row.description, row.input_schema, row.listing)


def schema_digest(input_schema: dict | None) -> str:
    """The digest of an input schema alone: a removed tool and a new one with the same schema look like a rename.
    The schema's own `title` is left out: SDKs name it after the tool (`search_memoryArguments`)."""
    schema = {key: value for key, value in (input_schema or {}).items() if key != "title"}
    canonical = json.dumps(schema, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def pending_of(
    name: str,
    description: str,
    input_schema: dict | None,
    listing: dict | None,
    is_write: bool,
    version_hash: str,
    *,
    renamed_from: str | None = None,
) -> dict:
    """What a quarantined row keeps of the provider's unreviewed definition (`ConnectionTool.pending_definition`)."""
    pending: dict[str, Any] = {
        "description": description or "",
        "inputSchema": input_schema or {},
        "listing": listing,
        "isWrite": is_write,
        "versionHash": version_hash,
        "digest": definition_digest(name, description, input_schema, listing),
    }
    if renamed_from:
        pending["renamedFrom"] = renamed_from
    return pending


@dataclass(frozen=True)
class DiffLine:
    kind: str  # "same", "added", "removed", "header"
    text: str


@dataclass(frozen=True)
class ToolChange:
    """A quarantined tool as the review shows it."""

    tool_name: str
    renamed_from: str | None  # a rename: the diff is against the old tool's definition
    description_diff: list[DiffLine]
    schema_diff: list[DiffLine]


def _lines(value: Any) -> list[str]:
    return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False).splitlines() if value else []


def _diff(old: list[str], new: list[str]) -> list[DiffLine]:
    out = []
    for line in difflib.unified_diff(old, new, "reviewed", "provider now", n=3, lineterm=""):
        if line.startswith(("---", "+++", "@@")):
            out.append(DiffLine("header", line))
        elif line.startswith("+"):
            out.append(DiffLine("added", line))
        elif line.startswith("-"):
            out.append(DiffLine("removed", line))
        else:
            out.append(DiffLine("same", line))
    return out


def _schema_view(definition: dict) -> dict:
    return {key: definition[key] for key in ("inputSchema", "outputSchema", "annotations") if definition[key]}


def change_of(row: ConnectionTool, before: ConnectionTool | None = None) -> ToolChange:
    """The readable diff of a quarantined row: the reviewed definition (or, for a rename, the old tool's) against
    the provider's pending one, description and schema apart."""
    pending = row.pending_definition or {}
    renamed_from = pending.get("renamedFrom")
    if renamed_from and before is not None:
        old = definition_of(before.name, before.description, before.input_schema, before.listing)
    elif renamed_from:  # the old tool's row is gone: everything is new
        old = definition_of(row.name, "", {}, None)
    else:
        old = definition_of(row.name, row.description, row.input_schema, row.listing)
    new = definition_of(
        row.name, pending.get("description", ""), pending.get("inputSchema"), pending.get("listing")
    )
    return ToolChange(
        tool_name=row.name,
        renamed_from=renamed_from,
        description_diff=_diff(old["description"].splitlines(), new["description"].splitlines()),
        schema_diff=_diff(_lines(_schema_view(old)), _lines(_schema_view(new))),
    )
