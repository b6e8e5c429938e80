"""Adapters: how a run reaches an agent (a local process or an HTTP agent service).

Adapters receive a fully built `Invocation` (see `app.services.runs.invocation.prepare_invocation`) and know nothing
about the database: they run the turn and hand back an `AdapterResult` with bounded output and the session id the
agent reported, if any. The server-owned fields of the invocation (the instruction snapshot, the runtime-tools
descriptor, the wake prompt) were already written over anything a caller supplied.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from app.models.run_logs import RUN_LOG_LIMIT

SESSION_LINE_KEY = "paperclipSession"


@dataclass(frozen=True)
class Invocation:
    """One execution turn, ready to hand to an adapter."""

    run_id: str
    agent_id: str
    company_id: str
    issue_id: str | None
    adapter_type: str
    config: dict[str, Any]
    context: dict[str, Any]
    prompt: str
    connection_instructions: dict | None
    runtime_tools: dict | None
    resume_session_id: str | None = None
    # Environment variables only this agent's runs receive (decrypted agent secrets such as a model API key).
    secret_env: dict[str, str] = field(default_factory=dict, repr=False)
    # A private folder kept per agent between turns (an agent CLI's own config home, where its sessions live).
    agent_home: str | None = None

    @property
    def fresh_session(self) -> bool:
        return self.resume_session_id is None


@dataclass
class AdapterResult:
    ok: bool
    stdout: str = ""
    stderr: str = ""
    exit_code: int | None = None
    http_status: int | None = None
    session_id: str | None = None
    error: str | None = None
    timed_out: bool = False
    truncated: bool = False
    details: dict = field(default_factory=dict)
    # An agent CLI's normalized, bounded events and the turn's summary (`app.adapters.agents.events`).
    events: list[dict] = field(default_factory=list)
    summary: dict | None = None


class Adapter(Protocol):
    def execute(self, invocation: Invocation) -> AdapterResult: ...


class TailBuffer:
    """Keeps the last `limit` bytes written to it; remembers whether anything was dropped."""

    def __init__(self, limit: int = RUN_LOG_LIMIT):
        self.limit = limit
        self.data = bytearray()
        self.truncated = False

    def write(self, chunk: bytes) -> None:
        self.data.extend(chunk)
        if len(self.data) > self.limit:
            del self.data[: len(self.data) - self.limit]
            self.truncated = True

    def text(self) -> str:
        return bytes(self.data).decode("utf-8", errors="replace")


def get_adapter(adapter_type: str) -> Adapter | None:
    """The adapter for an agent's `adapter_type`, or None for agents driven by hand (`manual`)."""
    if adapter_type in AGENT_CLI_ADAPTERS:
        from app.adapters.agents import cli_adapter

        return cli_adapter(adapter_type)
    if adapter_type == "process":
        from app.adapters.process import ProcessAdapter

        return ProcessAdapter()
    if adapter_type == "http":
        from app.adapters.http import HttpAdapter

        return HttpAdapter()
    return None


# The agent CLIs Switchboard runs with a managed MCP configuration (`app.adapters.agents`).
AGENT_CLI_ADAPTERS = ("claude_code", "codex", "gemini")
EXECUTABLE_ADAPTERS = ("process", "http", *AGENT_CLI_ADAPTERS)
