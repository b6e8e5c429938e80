"""Codex (`codex exec`) as an agent: one non-interactive turn with a managed, per-run configuration.

- Config home: `CODEX_HOME` is a private folder inside the run folder, holding this turn's `config.toml` (mode 0600):
  the model provider, the two MCP servers, the developer instructions, and telemetry, analytics, update checks and
  the features that reach other hosts (plugins, apps, remote plugins, browser and computer use) turned off. Its
  `sessions` folder is a link to the agent's private folder, so `codex exec resume <id>` finds earlier sessions while
  `~/.codex` is never read or written.
- MCP: `[mcp_servers.switchboard]` and `[mcp_servers.gateway]` with `bearer_token_env_var =
  "PAPERCLIP_RUNTIME_TOOLS_TOKEN"`: Codex reads the token from the environment, so it is in no file and on no command
  line.
- Prompts: the connection-instruction snapshot is `developer_instructions`; the wake prompt is the task prompt, on
  stdin (`-`).
- Output: `--json`, one event per line (`thread.started` carries the session id, `item.*` the agent's messages and
  MCP tool calls, `turn.completed` the usage, `turn.failed` and `error` what went wrong).
- The model endpoint: the provider `switchboard` with `baseUrl` (default OpenAI's) and the Responses API; the key is
  the agent's secret `OPENAI_API_KEY`.
"""

from __future__ import annotations

import json
import os
from typing import Any

from app.adapters import Invocation
from app.adapters.agents.events import TurnEvents
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

DEFAULT_BASE_URL = "https://api.openai.com/v1"
KEY_ENV = "OPENAI_API_KEY"
# Features that reach hosts other than the model endpoint and our doors (checked with strace: with them on, Codex
# resolves github.com, api.github.com and chatgpt.com at start).
FEATURES_OFF = (
    "plugins",
    "remote_plugin",
    "plugin_sharing",
    "apps",
    "skill_mcp_dependency_install",
    "api_key_model_discovery",
    "in_app_updates",
    "tool_suggest",
    "browser_use",
    "browser_use_external",
    "computer_use",
    "image_generation",
    "daemon_auto_start",
)


def toml_string(value: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's, except that TOML also refuses a raw DEL)."""
    return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")


def config_toml(invocation: Invocation, settings: CliSettings) -> str:
    lines = [
        "# Written by Switchboard for one turn; removed when the turn ends.",
        f"model_provider = {toml_string('switchboard')}",
        'approval_policy = "never"',
        'sandbox_mode = "workspace-write"',
        "check_for_update_on_startup = false",
    ]
    if settings.model:
        lines.append(f"model = {toml_string(settings.model)}")
    snapshot = invocation.connection_instructions
    if snapshot and snapshot.get("text"):
        lines.append(f"developer_instructions = {toml_string(snapshot['text'])}")
    lines += ["", "[analytics]", "enabled = false", "", "[feedback]", "enabled = false"]
    lines += ["", "[otel]", 'exporter = "none"', "", "[features]"]
    lines += [f"{feature} = false" for feature in FEATURES_OFF]
    lines += [
        "",
        "[model_providers.switchboard]",
        f"name = {toml_string('Switchboard agent model')}",
        f"base_url = {toml_string(settings.base_url or DEFAULT_BASE_URL)}",
        'wire_api = "responses"',
        f"env_key = {toml_string(KEY_ENV)}",
    ]
    for key, url in our_mcp_servers(invocation.runtime_tools):
        lines += [
            "",
            f"[mcp_servers.{key}]",
            f"url = {toml_string(str(url))}",
            f"bearer_token_env_var = {toml_string(TOKEN_ENV)}",
            # `approval_policy = "never"` alone refuses every MCP call in exec mode; Switchboard's gateway
            # decides each call (policy, approval cards), so Codex runs them.
            'default_tools_approval_mode = "approve"',
        ]
    return "\n".join(lines) + "\n"


class Codex:
    adapter_type = "codex"
    label = "Codex"
    default_binary = "codex"
    install_hint = "npm install -g @openai/codex"

    def __init__(self) -> None:
        self._failed_turn = False

    def turn(self, invocation: Invocation, paths: TurnPaths, binary: str, settings: CliSettings) -> CliTurn:
        codex_home = private_dir(paths.run_dir / "codex-home")
        write_private(codex_home / "config.toml", config_toml(invocation, settings))
        os.symlink(private_dir(paths.home / "sessions"), codex_home / "sessions")
        argv = [binary, "exec"]
        if invocation.resume_session_id:
            argv += ["resume", invocation.resume_session_id]
        argv += ["--json", "--skip-git-repo-check", *settings.extra_args, "-"]
        return CliTurn(argv=argv, stdin=invocation.prompt, env={"CODEX_HOME": str(codex_home)})

    def read(self, event: dict[str, Any], events: TurnEvents) -> None:
        kind = event.get("type")
        if kind == "thread.started":
            events.session(event.get("thread_id"))
        elif kind == "item.completed":
            item = event.get("item") or {}
            item_type = item.get("type")
            if item_type == "agent_message":
                events.message(item.get("text"))
            elif item_type == "mcp_tool_call":
                server = item.get("server") if item.get("server") in OUR_SERVERS else None
                ok = item.get("status") == "completed" and not item.get("error")
                events.tool_call(server, str(item.get("tool") or ""), ok)
            elif item_type == "command_execution":
                events.tool_call(None, "shell", item.get("exit_code") == 0)
        elif kind == "turn.completed":
            usage = event.get("usage") or {}
            events.add_usage(
                usage.get("input_tokens"), usage.get("output_tokens"), usage.get("cached_input_tokens")
            )
            events.result(True)
        elif kind == "turn.failed":
            events.fail((event.get("error") or {}).get("message") or "Codex reported that the turn failed.")
            events.result(False)
        elif kind == "error":
            events.fail(event.get("message"))
