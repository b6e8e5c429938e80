"""What an agent CLI's turn leaves behind: a bounded list of normalized events and a summary.

Each CLI profile turns its own machine-readable output (Claude Code's and Gemini CLI's stream JSON, Codex's `--json`
events) into these few shapes, so the run page, the evaluations and the tests read one format:

- `{"type": "session", "sessionId"}`: the CLI's session (resumable with its resume option);
- `{"type": "tool_call", "server", "tool", "status"}`: a tool the agent called (`server` is `switchboard` for the
  runtime tools, `gateway` for connected tools, None for the CLI's own), `status` `ok` or `error`;
- `{"type": "message", "text"}`: something the agent said (bounded);
- `{"type": "result", "ok", "usage", "costUsd"}`: how the turn ended, with token usage and cost where reported;
- `{"type": "error", "message"}`: an error the CLI reported.

Never arguments, tool results or secrets: every known secret value is replaced before an event is kept.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

EVENTS_LIMIT = 200
TEXT_LIMIT = 2000
REDACTED = "[redacted]"


def bounded_text(value: object, limit: int = TEXT_LIMIT) -> str:
    text = value if isinstance(value, str) else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


@dataclass
class TurnEvents:
    """Collects one turn's normalized events (at most `EVENTS_LIMIT`, the first and last kept when there are more)
    and what the summary needs."""

    secrets: Iterable[str] = ()
    events: list[dict[str, Any]] = field(default_factory=list)
    dropped: int = 0
    session_id: str | None = None
    final_message: str | None = None
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, int] = field(default_factory=dict)
    cost_usd: float | None = None
    failed: bool = False
    error: str | None = None

    def __post_init__(self) -> None:
        # Longest first, so a secret that contains another is replaced whole.
        self._secrets = sorted({s for s in self.secrets if s and len(s) >= 6}, key=len, reverse=True)

    def scrub(self, text: str) -> str:
        for secret in self._secrets:
            if secret in text:
                text = text.replace(secret, REDACTED)
        return text

    def add(self, event: dict[str, Any]) -> None:
        clean = {k: (self.scrub(v) if isinstance(v, str) else v) for k, v in event.items()}
        if len(self.events) < EVENTS_LIMIT:
            self.events.append(clean)
            return
        # Keep the first half and a sliding last half: the start and the end of a long turn both matter.
        self.dropped += 1
        del self.events[EVENTS_LIMIT // 2]
        self.events.append(clean)

    def session(self, session_id: object) -> None:
        if isinstance(session_id, str) and 0 < len(session_id) <= 300 and session_id != self.session_id:
            self.session_id = session_id
            self.add({"type": "session", "sessionId": session_id})

    def message(self, text: object) -> None:
        if isinstance(text, str) and text.strip():
            self.final_message = bounded_text(self.scrub(text))
            self.add({"type": "message", "text": self.final_message})

    def tool_call(self, server: str | None, tool: str, ok: bool) -> None:
        call = {"server": server, "tool": bounded_text(tool, 200), "status": "ok" if ok else "error"}
        if len(self.tool_calls) < EVENTS_LIMIT:
            self.tool_calls.append(call)
        self.add({"type": "tool_call", **call})

    def add_usage(self, input_tokens: object = 0, output_tokens: object = 0, cached: object = 0) -> None:
        for key, value in (
            ("inputTokens", input_tokens),
            ("outputTokens", output_tokens),
            ("cachedTokens", cached),
        ):
            if isinstance(value, int) and value > 0:
                self.usage[key] = self.usage.get(key, 0) + value

    def result(self, ok: bool, cost_usd: object = None) -> None:
        if isinstance(cost_usd, int | float):
            self.cost_usd = float(cost_usd)
        self.failed = self.failed or not ok
        self.add({"type": "result", "ok": ok, "usage": dict(self.usage), "costUsd": self.cost_usd})

    def fail(self, message: object) -> None:
        self.failed = True
        self.error = bounded_text(
            self.scrub(message if isinstance(message, str) else "The agent CLI failed.")
        )
        self.add({"type": "error", "message": self.error})

    def summary(self) -> dict[str, Any]:
        return {
            "sessionId": self.session_id,
            "finalMessage": self.final_message,
            "toolCalls": self.tool_calls,
            "usage": dict(self.usage),
            "costUsd": self.cost_usd,
            "eventsDropped": self.dropped,
        }


def split_mcp_name(
    name: str, servers: Iterable[str], pattern: str = "mcp__{server}__"
) -> tuple[str | None, str]:
    """`mcp__<server>__<tool>` (or the CLI's own `pattern` of the prefix, Gemini's `mcp_{server}_`) -> (server,
    tool) for one of our servers; anything else is the CLI's own tool."""
    for server in servers:
        prefix = pattern.format(server=server)
        if name.startswith(prefix):
            return server, name[len(prefix) :]
    return None, name
