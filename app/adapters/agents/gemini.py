"""Gemini CLI (`gemini`) as an agent: one headless turn with a managed, per-run configuration home.

- Config home: Gemini CLI reads `$GEMINI_CLI_HOME/.gemini/` instead of `~/.gemini/` when `GEMINI_CLI_HOME` is set,
  so HOME is left alone and `~/.gemini` is never read or written. `GEMINI_CLI_HOME` is a private folder inside the run
  folder holding this turn's `.gemini/settings.json` (mode 0600): telemetry, usage statistics, auto-update and the
  update nag off, API-key auth, and the two MCP servers. Its `tmp` (sessions, under `tmp/<project>/chats`) and
  `history` folders are links to the agent's private folder, so `--resume <id>` finds earlier sessions; the project
  registry (`projects.json`) is rebuilt each turn from the ownership markers in those folders.
- MCP: `mcpServers.switchboard` and `mcpServers.gateway` (`httpUrl`) with the header
  `Authorization: Bearer ${PAPERCLIP_RUNTIME_TOOLS_TOKEN}`, which Gemini CLI expands from its environment: the token
  is in no file and on no command line. `"trust": true` lets the headless turn call them (without it Gemini does not
  even offer MCP tools to the model); every gateway call is still decided by Switchboard's policy.
  `--allowed-mcp-server-names switchboard,gateway` leaves out any other server (a workspace's own settings). Gemini
  names MCP tools `mcp_<server>_<tool>`, at most 63 characters (longer names are cut in the middle).
- Prompts: the connection-instruction snapshot is the private home's global context file `.gemini/GEMINI.md`, which
  Gemini CLI appends to its own system prompt (in `systemInstruction`, under "Contextual Instructions", on every
  request); `GEMINI_SYSTEM_MD` is not used because it would replace Gemini's whole system prompt. The wake prompt is
  the task prompt, on stdin (a non-terminal stdin runs Gemini headless).
- Output: `--output-format stream-json`, one event per line (`init` carries the session id, `message` the agent's
  text in deltas, `tool_use`/`tool_result` the tool calls, `error` what went wrong, `result` the outcome and usage).
- The model endpoint: `baseUrl` becomes `GOOGLE_GEMINI_BASE_URL` (default Google's); the key is the agent's secret
  `GEMINI_API_KEY`. `GEMINI_CLI_TRUST_WORKSPACE` lets it run headless in the working directory, and
  `GEMINI_CLI_NO_RELAUNCH` keeps it from restarting itself in a second node process.
"""

from __future__ import annotations

import json
import os
from typing import Any

from app.adapters import Invocation
from app.adapters.agents.events import TurnEvents, split_mcp_name
from app.adapters.agents.runner import (
    OUR_SERVERS,
    TOKEN_ENV,
    CliSettings,
    CliTurn,
    TurnPaths,
    our_mcp_servers,
    private_dir,
    write_private,
)

KEY_ENV = "GEMINI_API_KEY"
HOME_ENV = "GEMINI_CLI_HOME"
CONTEXT_FILE = "GEMINI.md"
# Gemini CLI's MCP tool names: `mcp_<server>_<tool>`.
TOOL_NAME_PATTERN = "mcp_{server}_"
# What Gemini CLI keeps between turns in its home: sessions (`tmp/<project>/chats`) and the project markers.
KEPT_FOLDERS = ("tmp", "history")


def settings_json(runtime_tools: dict | None) -> dict[str, Any]:
    """The per-run `settings.json`: nothing phones home, API-key auth, our two MCP servers authorized from the
    environment."""
    servers = {
        key: {"httpUrl": url, "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}, "trust": True}
        for key, url in our_mcp_servers(runtime_tools)
    }
    return {
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "mcpServers": servers,
    }


class Gemini:
    adapter_type = "gemini"
    label = "Gemini CLI"
    default_binary = "gemini"
    install_hint = "npm install -g @google/gemini-cli"

    def __init__(self) -> None:
        self._pending_tools: dict[str, str] = {}
        self._text: list[str] = []

    def turn(self, invocation: Invocation, paths: TurnPaths, binary: str, settings: CliSettings) -> CliTurn:
        gemini_home = private_dir(paths.run_dir / "gemini-home")
        config_dir = private_dir(gemini_home / ".gemini")
        write_private(
            config_dir / "settings.json", json.dumps(settings_json(invocation.runtime_tools), indent=2)
        )
        snapshot = invocation.connection_instructions
        if snapshot and snapshot.get("text"):
            write_private(config_dir / CONTEXT_FILE, snapshot["text"])
        for folder in KEPT_FOLDERS:
            os.symlink(private_dir(paths.home / folder), config_dir / folder)
        argv = [
            binary,
            "--output-format",
            "stream-json",
            "--allowed-mcp-server-names",
            ",".join(OUR_SERVERS),
        ]
        if settings.model:
            argv += ["--model", settings.model]
        if invocation.resume_session_id:
            argv += ["--resume", invocation.resume_session_id]
        argv += settings.extra_args
        env = {
            HOME_ENV: str(gemini_home),
            "GEMINI_CLI_TRUST_WORKSPACE": "true",
            "GEMINI_CLI_NO_RELAUNCH": "true",
        }
        if settings.base_url:
            env["GOOGLE_GEMINI_BASE_URL"] = settings.base_url
        return CliTurn(argv=argv, stdin=invocation.prompt, env=env)

    def _flush_text(self, events: TurnEvents) -> None:
        if self._text:
            events.message("".join(self._text))
            self._text = []

    def read(self, event: dict[str, Any], events: TurnEvents) -> None:
        kind = event.get("type")
        if kind == "init":
            events.session(event.get("session_id"))
        elif kind == "message" and event.get("role") == "assistant":
            content = event.get("content")
            if isinstance(content, str):
                if not event.get("delta"):
                    self._flush_text(events)
                self._text.append(content)
        elif kind == "tool_use":
            self._flush_text(events)
            self._pending_tools[str(event.get("tool_id"))] = str(event.get("tool_name") or "")
        elif kind == "tool_result":
            name = self._pending_tools.pop(str(event.get("tool_id")), "")
            server, tool = split_mcp_name(name, OUR_SERVERS, TOOL_NAME_PATTERN)
            events.tool_call(server, tool, event.get("status") == "success")
        elif kind == "error":
            # Warnings (a retried request, a blocked tool) stay in the raw log; errors end the turn.
            if event.get("severity") == "error":
                events.fail(event.get("message"))
        elif kind == "result":
            self._flush_text(events)
            stats = event.get("stats") or {}
            events.add_usage(stats.get("input_tokens"), stats.get("output_tokens"), stats.get("cached"))
            ok = event.get("status") == "success"
            if not ok:
                error = event.get("error") or {}
                if error.get("message") or not events.failed:
                    events.fail(error.get("message") or "Gemini CLI reported that the turn failed.")
            events.result(ok)
