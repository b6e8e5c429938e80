"""The agent CLIs Switchboard runs as agents, each with a managed MCP configuration (`runner` owns what they share).

`claude_code` runs Claude Code (`claude -p`), `codex` runs Codex (`codex exec`), `gemini` runs Gemini CLI (`gemini`,
headless). Each turn receives the runtime tools (`/mcp/runtime-tools`) and the tool gateway (`/mcp/gateway`) as two
MCP servers authorized with the run's token from the environment, the connection-instruction snapshot in its system
or developer prompt, and the wake prompt as its task prompt; its machine-readable output becomes the run's session,
bounded events and summary.
"""

from __future__ import annotations

from collections.abc import Callable

from app.adapters.agents.claude_code import ClaudeCode
from app.adapters.agents.codex import Codex
from app.adapters.agents.gemini import Gemini
from app.adapters.agents.runner import AgentCli, AgentCliAdapter

PROFILES: dict[str, Callable[[], AgentCli]] = {"claude_code": ClaudeCode, "codex": Codex, "gemini": Gemini}


def cli_adapter(adapter_type: str) -> AgentCliAdapter:
    return AgentCliAdapter(PROFILES[adapter_type])
