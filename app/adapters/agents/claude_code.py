"""Claude Code (`claude`) as an agent: one `claude -p` turn with a managed MCP configuration.

- MCP: `--mcp-config <run folder>/mcp.json` with `--strict-mcp-config`, so only Switchboard's two servers are
  loaded (never the person's own or a project's `.mcp.json`). Each server's `Authorization` header is
  `Bearer ${PAPERCLIP_RUNTIME_TOOLS_TOKEN}`, expanded by Claude Code from the environment: the token is in no file
  and on no command line. `--allowedTools mcp__switchboard,mcp__gateway` lets the turn call them without a prompt;
  every gateway call is still decided by Switchboard's policy.
- Config home: `CLAUDE_CONFIG_DIR` is the agent's private folder, where sessions live (`--resume <id>` continues one);
  `~/.claude` is never read or written. Telemetry, error reports, the auto-updater and other non-essential traffic
  are off.
- Prompts: the connection-instruction snapshot goes into the system prompt with `--append-system-prompt-file`; the
  wake prompt is the task prompt, on stdin.
- Output: `--output-format stream-json --verbose`, one JSON event per line (`system/init` carries the session id,
  `assistant` messages the tool uses, `user` messages their results, `result` the final text, usage and cost).
- The model endpoint: `baseUrl` becomes `ANTHROPIC_BASE_URL`; the key is the agent's secret `ANTHROPIC_API_KEY`.
"""

from __future__ import annotations

import json
from typing import Any

from app.adapters import Invocation
from app.adapters.agents.events import TurnEvents, bounded_text, split_mcp_name
from app.adapters.agents.runner import (
    OUR_SERVERS,
    TOKEN_ENV,
    CliSettings,
    CliTurn,
    TurnPaths,
    our_mcp_servers,
    write_private,
)

QUIET_ENV = {
    "DISABLE_TELEMETRY": "1",
    "DISABLE_ERROR_REPORTING": "1",
    "DISABLE_AUTOUPDATER": "1",
    "DISABLE_BUG_COMMAND": "1",
    "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
}


def mcp_config(runtime_tools: dict | None) -> dict[str, Any]:
    """The per-run MCP configuration: the runtime tools and the gateway, authorized from the environment."""
    servers = {
        key: {"type": "http", "url": url, "headers": {"Authorization": f"Bearer ${{{TOKEN_ENV}}}"}}
        for key, url in our_mcp_servers(runtime_tools)
    }
    return {"mcpServers": servers}


class ClaudeCode:
    adapter_type = "claude_code"
    label = "Claude Code"
    default_binary = "claude"
    install_hint = "npm install -g @anthropic-ai/claude-code"

    def __init__(self) -> None:
        self._pending_tools: dict[str, str] = {}

    def turn(self, invocation: Invocation, paths: TurnPaths, binary: str, settings: CliSettings) -> CliTurn:
        config_path = paths.run_dir / "mcp.json"
        write_private(config_path, json.dumps(mcp_config(invocation.runtime_tools), indent=2))
        argv = [
            binary,
            "--print",
            "--output-format",
            "stream-json",
            "--verbose",
            "--strict-mcp-config",
            "--mcp-config",
            str(config_path),
            "--allowedTools",
            ",".join(f"mcp__{server}" for server in OUR_SERVERS),
        ]
        snapshot = invocation.connection_instructions
        if snapshot and snapshot.get("text"):
            prompt_path = paths.run_dir / "system-prompt.md"
            write_private(prompt_path, snapshot["text"])
            argv += ["--append-system-prompt-file", str(prompt_path)]
        if settings.model:
            argv += ["--model", settings.model]
        if invocation.resume_session_id:
            argv += ["--resume", invocation.resume_session_id]
        argv += settings.extra_args
        env = {**QUIET_ENV, "CLAUDE_CONFIG_DIR": str(paths.home)}
        if settings.base_url:
            env["ANTHROPIC_BASE_URL"] = settings.base_url
        return CliTurn(argv=argv, stdin=invocation.prompt, env=env)

    def read(self, event: dict[str, Any], events: TurnEvents) -> None:
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            events.session(event.get("session_id"))
        elif kind == "assistant":
            for block in (event.get("message") or {}).get("content") or []:
                if block.get("type") == "tool_use":
                    self._pending_tools[str(block.get("id"))] = str(block.get("name") or "")
                elif block.get("type") == "text":
                    events.message(block.get("text"))
        elif kind == "user":
            for block in (event.get("message") or {}).get("content") or []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    name = self._pending_tools.pop(str(block.get("tool_use_id")), "")
                    server, tool = split_mcp_name(name, OUR_SERVERS)
                    events.tool_call(server, tool, not block.get("is_error"))
        elif kind == "result":
            events.session(event.get("session_id"))
            usage = event.get("usage") or {}
            events.add_usage(
                usage.get("input_tokens"), usage.get("output_tokens"), usage.get("cache_read_input_tokens")
            )
            text = event.get("result")
            if isinstance(text, str) and text.strip():
                events.final_message = bounded_text(events.scrub(text))
            ok = not event.get("is_error") and event.get("subtype") == "success"
            if not ok:
                events.fail(
                    text if isinstance(text, str) and text else f"Claude Code: {event.get('subtype')}"
                )
            events.result(ok, event.get("total_cost_usd"))
