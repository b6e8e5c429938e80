"""A connection's call limits as figures (per kind, scope and window) and the loop breaker's settings, with the
defaults; no database. The gateway's tool map carries them (`tools`), and `limits` counts calls against them."""

from __future__ import annotations

from dataclasses import dataclass

KINDS = ("read", "write")
SCOPES = ("grant", "agent", "run", "tool")
WINDOWS = {"minute": 60, "day": 86_400}
MAX_LIMIT = 1_000_000
LOOP_REPEATS_RANGE = (1, 10_000)
LOOP_SECONDS_RANGE = (10, 86_400)
REFUSALS_WINDOW = 86_400

# (per minute, per day) per scope; write tools get lower figures.
DEFAULTS: dict[str, dict[str, dict[str, int | None]]] = {
    "read": {
        "grant": {"minute": 300, "day": 20_000},
        "agent": {"minute": 120, "day": 10_000},
        "run": {"minute": 60, "day": 2_000},
        "tool": {"minute": 60, "day": 5_000},
    },
    "write": {
        "grant": {"minute": 60, "day": 2_000},
        "agent": {"minute": 30, "day": 1_000},
        "run": {"minute": 20, "day": 300},
        "tool": {"minute": 20, "day": 500},
    },
}
DEFAULT_LOOP: dict[str, int | None] = {"repeats": 10, "seconds": 60}

SCOPE_LABELS = {
    "grant": "Per identity (all agents)",
    "agent": "Per agent",
    "run": "Per run",
    "tool": "Per tool (all agents)",
}


@dataclass(frozen=True)
class CallLimits:
    """A connection's limits: `figures[kind][scope][window]` (None: no limit) and the loop breaker (None: off)."""

    figures: dict[str, dict[str, dict[str, int | None]]]
    loop_repeats: int | None
    loop_seconds: int

    @classmethod
    def of(cls, stored: dict | None) -> CallLimits:
        """The limits a connection's `call_limits` says, defaults filling what it leaves out."""
        stored = as_mapping(stored)
        figures: dict[str, dict[str, dict[str, int | None]]] = {}
        for kind in KINDS:
            kind_stored = as_mapping(stored.get(kind))
            figures[kind] = {}
            for scope in SCOPES:
                scope_stored = as_mapping(kind_stored.get(scope))
                figures[kind][scope] = {
                    window: figure_of(scope_stored, window, DEFAULTS[kind][scope][window])
                    for window in WINDOWS
                }
        loop = as_mapping(stored.get("loop"))
        seconds = figure_of(loop, "seconds", DEFAULT_LOOP["seconds"])
        return cls(figures, figure_of(loop, "repeats", DEFAULT_LOOP["repeats"]), seconds or 60)

    def limit(self, kind: str, scope: str, window: str) -> int | None:
        return self.figures[kind][scope][window]

    def stored(self) -> dict:
        return {**self.figures, "loop": {"repeats": self.loop_repeats, "seconds": self.loop_seconds}}


def as_mapping(value: object) -> dict:
    return value if isinstance(value, dict) else {}


def figure_of(values: dict, key: str, default: int | None) -> int | None:
    if key not in values:
        return default
    value = values[key]
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
