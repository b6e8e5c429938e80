"""Visible tool names: `<connection slug>__<tool>` (the rule is in the package docstring), shared by the tool map
(`tools`) and the listing (`listing`)."""

from __future__ import annotations

import hashlib
import re
import uuid
from collections.abc import Sequence
from typing import Protocol

NAME_SEPARATOR = "__"
SLUG_MAX_LENGTH = 32
NAME_MAX_LENGTH = 128


def connection_slug(name: str) -> str:
    """The stable, name-safe slug of a connection name (see the package docstring)."""
    slug = re.sub(r"[^a-z0-9]+", "-", (name or "").lower()).strip("-")
    slug = slug[:SLUG_MAX_LENGTH].rstrip("-")
    return slug or "connection"


def visible_name(slug: str, tool_name: str) -> str:
    name = f"{slug}{NAME_SEPARATOR}{tool_name}"
    if len(name) <= NAME_MAX_LENGTH:
        return name
    suffix = "-" + hashlib.sha256(tool_name.encode()).hexdigest()[:8]
    return name[: NAME_MAX_LENGTH - len(suffix)] + suffix


class NamedConnection(Protocol):
    """What slugs read of a connection: a `ToolConnection` or a plain `ConnectionRow`."""

    @property
    def id(self) -> uuid.UUID: ...
    @property
    def name(self) -> str: ...


def connection_slugs(connections: Sequence[NamedConnection]) -> dict[uuid.UUID, str]:
    """Each connection's slug among these (the ones the agent sees): a shared slug gets the id's first 8 hex."""
    base = {c.id: connection_slug(c.name) for c in connections}
    counts: dict[str, int] = {}
    for slug in base.values():
        counts[slug] = counts.get(slug, 0) + 1
    return {cid: (slug if counts[slug] == 1 else f"{slug}-{cid.hex[:8]}") for cid, slug in base.items()}
