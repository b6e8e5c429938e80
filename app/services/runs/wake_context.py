"""Server-owned fields of a run's context (`paperclipTurn`, `paperclipWake`): callers cannot supply them."""

from __future__ import annotations

import copy
from typing import Any

SERVER_OWNED_FIELDS = frozenset(
    {"connectionInstructions", "paperclipConnectionInstructions", "paperclipRuntimeTools"}
)
TURN_KEY = "paperclipTurn"
WAKE_KEY = "paperclipWake"


# --- scrubbing caller-supplied server fields ---------------------------------------------------------------------


def scrub_server_fields(value: Any) -> Any:
    """A deep copy of `value` without server-owned keys at any depth (and without the frozen-turn record)."""
    if isinstance(value, dict):
        return {
            k: scrub_server_fields(v)
            for k, v in value.items()
            if k not in SERVER_OWNED_FIELDS and k != TURN_KEY
        }
    if isinstance(value, list):
        return [scrub_server_fields(v) for v in value]
    return copy.deepcopy(value)


def _scrub_config(config: dict | None) -> dict:
    scrubbed = scrub_server_fields(config or {})
    env = scrubbed.get("env")
    if isinstance(env, dict):
        scrubbed["env"] = {k: v for k, v in env.items() if not str(k).startswith("PAPERCLIP_")}
    return scrubbed
