"""The agent CLI adapters' own rules, without a model: what a turn writes and passes (files, argv, environment), the
missing-binary error, the timeout that kills the process group, and cleanup on every exit path.

The "CLI" here is a small shell script standing in for the binary: these tests are about Switchboard's runner (the
real CLIs are driven end to end in tests/browser/test_agent_clis.py and tests/adapters/test_model_server.py).
"""

from __future__ import annotations

import glob
import json
import os
import stat
import tempfile
import tomllib
from pathlib import Path

import pytest

from app.adapters import Invocation
from app.adapters.agents import cli_adapter
from app.adapters.agents.claude_code import mcp_config
from app.adapters.agents.codex import config_toml
from app.adapters.agents.gemini import settings_json
from app.adapters.agents.runner import RUN_DIR_PREFIX, CliSettings

TOKEN = "run-token-abcdefghijklmnop"
SECRET = "sk-agent-secret-0123456789"
SNAPSHOT = {"text": '## Connection instructions\n\nUse Honcho "carefully".\x7f', "digest": "d" * 64}
DESCRIPTOR = {
    "mcpEndpoint": "http://127.0.0.1:5000/mcp/runtime-tools",
    "gatewayMcpEndpoint": "http://127.0.0.1:5000/mcp/gateway",
    "bearerToken": TOKEN,
    "rest": {},
    "tools": ["connections_search", "connection_request"],
    "guidance": "Use the runtime tools.",
}


def invocation(adapter_type: str, config: dict, **overrides) -> Invocation:
    fields = {
        "run_id": "run-1",
        "agent_id": "agent-1",
        "company_id": "company-1",
        "issue_id": "issue-1",
        "adapter_type": adapter_type,
        "config": config,
        "context": {},
        "prompt": "You are Builder.\n",
        "connection_instructions": SNAPSHOT,
        "runtime_tools": DESCRIPTOR,
        "secret_env": {"ANTHROPIC_API_KEY": SECRET, "OPENAI_API_KEY": SECRET, "GEMINI_API_KEY": SECRET},
    }
    fields.update(overrides)
    return Invocation(**fields)


def fake_cli(tmp_path: Path, body: str) -> str:
    """A stand-in binary: records its argv, environment, stdin and the run folder's files, then runs `body`."""
    script = tmp_path / "fake-cli"
    script.write_text(
        "#!/bin/sh\n"
        f'out="{tmp_path}/seen"\n'
        'mkdir -p "$out"\n'
        'printf "%s\\n" "$@" > "$out/argv"\n'
        'env > "$out/env"\n'
        'cat > "$out/stdin"\n'
        'for f in "$(dirname "$PAPERCLIP_CONNECTION_INSTRUCTIONS_FILE")"/*; do '
        'ls -ld "$f" >> "$out/files"; done\n'
        f"{body}\n"
    )
    script.chmod(0o755)
    return str(script)


@pytest.fixture(autouse=True)
def private_tempdir(tmp_path, monkeypatch):
    """Run folders are counted in a temporary folder of this test's own: another test process (pytest-xdist) that
    runs an agent at the same moment makes its run folders in the shared one."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))


def run_dirs() -> set[str]:
    return set(glob.glob(os.path.join(tempfile.gettempdir(), RUN_DIR_PREFIX + "*")))


def test_claude_code_mcp_configuration_reads_the_token_from_the_environment():
    config = mcp_config(DESCRIPTOR)
    assert config == {
        "mcpServers": {
            "switchboard": {
                "type": "http",
                "url": "http://127.0.0.1:5000/mcp/runtime-tools",
                "headers": {"Authorization": "Bearer ${PAPERCLIP_RUNTIME_TOOLS_TOKEN}"},
            },
            "gateway": {
                "type": "http",
                "url": "http://127.0.0.1:5000/mcp/gateway",
                "headers": {"Authorization": "Bearer ${PAPERCLIP_RUNTIME_TOOLS_TOKEN}"},
            },
        }
    }
    assert mcp_config(None) == {"mcpServers": {}}


def test_codex_configuration_is_valid_toml_with_the_token_named_not_written():
    settings = CliSettings.of({"model": "gpt-5-codex", "baseUrl": "http://127.0.0.1:9/v1"}, "codex")
    text = config_toml(invocation("codex", {}), settings)
    assert TOKEN not in text and SECRET not in text
    parsed = tomllib.loads(text)
    assert parsed["developer_instructions"] == SNAPSHOT["text"]
    assert parsed["model"] == "gpt-5-codex" and parsed["model_provider"] == "switchboard"
    assert parsed["model_providers"]["switchboard"] == {
        "name": "Switchboard agent model",
        "base_url": "http://127.0.0.1:9/v1",
        "wire_api": "responses",
        "env_key": "OPENAI_API_KEY",
    }
    assert parsed["mcp_servers"] == {
        "switchboard": {
            "url": "http://127.0.0.1:5000/mcp/runtime-tools",
            "bearer_token_env_var": "PAPERCLIP_RUNTIME_TOOLS_TOKEN",
            "default_tools_approval_mode": "approve",
        },
        "gateway": {
            "url": "http://127.0.0.1:5000/mcp/gateway",
            "bearer_token_env_var": "PAPERCLIP_RUNTIME_TOOLS_TOKEN",
            "default_tools_approval_mode": "approve",
        },
    }
    assert parsed["analytics"] == {"enabled": False} and parsed["features"]["plugins"] is False
    assert parsed["check_for_update_on_startup"] is False


def test_gemini_settings_turn_off_what_phones_home_and_read_the_token_from_the_environment():
    server = {"headers": {"Authorization": "Bearer ${PAPERCLIP_RUNTIME_TOOLS_TOKEN}"}, "trust": True}
    assert settings_json(DESCRIPTOR) == {
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "mcpServers": {
            "switchboard": {"httpUrl": "http://127.0.0.1:5000/mcp/runtime-tools", **server},
            "gateway": {"httpUrl": "http://127.0.0.1:5000/mcp/gateway", **server},
        },
    }
    assert settings_json(None)["mcpServers"] == {}


@pytest.mark.parametrize("adapter_type", ["claude_code", "codex", "gemini"])
def test_a_turn_keeps_the_token_off_the_command_line_and_removes_its_files(tmp_path, adapter_type):
    before = run_dirs()
    binary = fake_cli(tmp_path, "exit 0")
    home = tmp_path / "agent-home"
    result = cli_adapter(adapter_type).execute(
        invocation(adapter_type, {"binary": binary, "model": "m1"}, agent_home=str(home))
    )
    assert result.ok, result.error
    seen = tmp_path / "seen"
    argv = (seen / "argv").read_text()
    assert TOKEN not in argv and SECRET not in argv
    env = dict(line.split("=", 1) for line in (seen / "env").read_text().splitlines() if "=" in line)
    assert env["PAPERCLIP_RUNTIME_TOOLS_TOKEN"] == TOKEN
    assert (seen / "stdin").read_text() == "You are Builder.\n"
    # The run's files were private (0600 in a 0700 folder) and are gone.
    for line in (seen / "files").read_text().splitlines():
        if line.startswith("-"):
            assert line.startswith("-rw-------"), line
    assert run_dirs() == before
    assert stat.S_IMODE(os.stat(home / adapter_type).st_mode) == 0o700
    if adapter_type == "claude_code":
        assert env["CLAUDE_CONFIG_DIR"] == str(home / "claude_code")
        assert env["DISABLE_TELEMETRY"] == "1" and env["CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC"] == "1"
        args = argv.splitlines()
        assert args[:5] == ["--print", "--output-format", "stream-json", "--verbose", "--strict-mcp-config"]
        assert args[args.index("--allowedTools") + 1] == "mcp__switchboard,mcp__gateway"
        assert args[args.index("--model") + 1] == "m1" and "--resume" not in args
    elif adapter_type == "codex":
        assert env["CODEX_HOME"].startswith(os.path.join(tempfile.gettempdir(), RUN_DIR_PREFIX))
        assert argv.splitlines() == ["exec", "--json", "--skip-git-repo-check", "-"]
        assert (home / "codex" / "sessions").is_dir()
    else:
        assert env["GEMINI_CLI_HOME"].startswith(os.path.join(tempfile.gettempdir(), RUN_DIR_PREFIX))
        assert (
            env["HOME"] == os.environ["HOME"]
        )  # the person's, never written: GEMINI_CLI_HOME replaces ~/.gemini
        assert argv.splitlines() == [
            "--output-format",
            "stream-json",
            "--allowed-mcp-server-names",
            "switchboard,gateway",
            "--model",
            "m1",
        ]
        assert (home / "gemini" / "tmp").is_dir() and (home / "gemini" / "history").is_dir()


def test_a_gemini_turn_writes_its_settings_and_the_snapshot_privately_and_links_its_sessions(tmp_path):
    before = run_dirs()
    seen = tmp_path / "seen"
    # The stand-in records the private home's tree (mode, kind, link target) and the two files Switchboard wrote.
    body = (
        f'find "$GEMINI_CLI_HOME" -exec stat -c "%a|%F|%N" {{}} \\; > "{seen}/tree"\n'
        f'cat "$GEMINI_CLI_HOME/.gemini/settings.json" > "{seen}/settings.json"\n'
        f'cat "$GEMINI_CLI_HOME/.gemini/GEMINI.md" > "{seen}/context.md" 2>/dev/null || true'
    )
    binary = fake_cli(tmp_path, body)
    home = tmp_path / "agent-home"
    config = {"binary": binary, "model": "gemini-2.5-flash", "baseUrl": "http://127.0.0.1:9"}
    result = cli_adapter("gemini").execute(invocation("gemini", config, agent_home=str(home)))
    assert result.ok, result.error
    assert run_dirs() == before
    env = dict(line.split("=", 1) for line in (seen / "env").read_text().splitlines() if "=" in line)
    assert (env["GOOGLE_GEMINI_BASE_URL"], env["GEMINI_API_KEY"]) == ("http://127.0.0.1:9", SECRET)
    assert env["GEMINI_CLI_TRUST_WORKSPACE"] == "true" and env["GEMINI_CLI_NO_RELAUNCH"] == "true"
    gemini_home = env["GEMINI_CLI_HOME"]
    tree = {}
    for line in (seen / "tree").read_text().splitlines():
        mode, kind, name = line.split("|", 2)
        tree[name.replace(gemini_home, "~")] = (mode, kind)
    assert tree == {
        "'~'": ("700", "directory"),
        "'~/.gemini'": ("700", "directory"),
        "'~/.gemini/settings.json'": ("600", "regular file"),
        "'~/.gemini/GEMINI.md'": ("600", "regular file"),
        f"'~/.gemini/tmp' -> '{home / 'gemini' / 'tmp'}'": ("777", "symbolic link"),
        f"'~/.gemini/history' -> '{home / 'gemini' / 'history'}'": ("777", "symbolic link"),
    }
    settings = (seen / "settings.json").read_text()
    assert json.loads(settings) == settings_json(DESCRIPTOR)
    # The snapshot is the global context file Gemini CLI appends to its system prompt, word for word.
    assert (seen / "context.md").read_text() == SNAPSHOT["text"]
    for text in (settings, (seen / "argv").read_text(), (seen / "context.md").read_text()):
        assert TOKEN not in text and SECRET not in text

    # Without instructions there is no context file.
    (seen / "context.md").unlink()
    result = cli_adapter("gemini").execute(
        invocation("gemini", config, agent_home=str(home), connection_instructions=None)
    )
    assert result.ok, result.error
    assert not (seen / "context.md").read_text()


def test_a_resumed_turn_names_the_session(tmp_path):
    binary = fake_cli(tmp_path, "exit 0")
    for adapter_type in ("claude_code", "codex", "gemini"):
        cli_adapter(adapter_type).execute(
            invocation(adapter_type, {"binary": binary}, resume_session_id="sess-1", agent_home=str(tmp_path))
        )
        args = (tmp_path / "seen" / "argv").read_text().splitlines()
        if adapter_type == "codex":
            assert args == ["exec", "resume", "sess-1", "--json", "--skip-git-repo-check", "-"]
        else:
            assert args[args.index("--resume") + 1] == "sess-1"


def test_a_missing_binary_is_a_clear_error(tmp_path):
    result = cli_adapter("claude_code").execute(invocation("claude_code", {"binary": "no-such-claude-xyz"}))
    assert not result.ok
    assert result.error == (
        "Claude Code was not found: `no-such-claude-xyz` is not on PATH. Install it "
        "(npm install -g @anthropic-ai/claude-code) or set the binary's path on the agent's page."
    )
    result = cli_adapter("codex").execute(invocation("codex", {"binary": str(tmp_path / "codex")}))
    assert result.error == f"Codex was not found at {tmp_path / 'codex'} (not an executable file)."


def test_bad_settings_are_refused_before_anything_runs(tmp_path):
    for config, message in (
        ({"extraArgs": "--x"}, "extraArgs must be a list of strings."),
        ({"timeoutSeconds": "soon"}, "timeoutSeconds must be a number."),
        ({"baseUrl": "file:///etc"}, "baseUrl must be an http(s) URL."),
    ):
        result = cli_adapter("codex").execute(invocation("codex", config))
        assert (result.ok, result.error) == (False, message)


def test_a_timeout_kills_the_whole_process_group_and_says_so(tmp_path):
    before = run_dirs()
    marker = tmp_path / "child-alive"
    # The CLI starts a background child that would outlive it, then hangs.
    binary = fake_cli(tmp_path, f'(sleep 30; touch "{marker}") & sleep 30')
    result = cli_adapter("claude_code").execute(
        invocation("claude_code", {"binary": binary, "timeoutSeconds": 1}, agent_home=str(tmp_path))
    )
    assert not result.ok and result.timed_out
    assert result.error == "Claude Code timed out after 1 seconds; its process group was stopped."
    assert result.events[-1] == {"type": "error", "message": result.error}
    assert run_dirs() == before
    assert not marker.exists()


def test_stream_events_become_bounded_scrubbed_events(tmp_path):
    lines = [
        {"type": "system", "subtype": "init", "session_id": "s-1"},
        {
            "type": "assistant",
            "message": {
                "content": [{"type": "tool_use", "id": "t1", "name": "mcp__gateway__honcho__search"}]
            },
        },
        {
            "type": "user",
            "message": {"content": [{"type": "tool_result", "tool_use_id": "t1", "is_error": True}]},
        },
        {"type": "assistant", "message": {"content": [{"type": "text", "text": f"my key is {SECRET}"}]}},
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "result": "Done.",
            "session_id": "s-1",
            "total_cost_usd": 0.25,
            "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 3},
        },
    ]
    body = "cat <<'EOF'\n" + "\n".join(json.dumps(line) for line in lines) + "\nnot json\nEOF"
    result = cli_adapter("claude_code").execute(
        invocation("claude_code", {"binary": fake_cli(tmp_path, body)}, agent_home=str(tmp_path))
    )
    assert result.ok and result.session_id == "s-1"
    assert result.events == [
        {"type": "session", "sessionId": "s-1"},
        {"type": "tool_call", "server": "gateway", "tool": "honcho__search", "status": "error"},
        {"type": "message", "text": "my key is [redacted]"},
        {
            "type": "result",
            "ok": True,
            "usage": {"inputTokens": 10, "outputTokens": 5, "cachedTokens": 3},
            "costUsd": 0.25,
        },
    ]
    assert result.summary == {
        "sessionId": "s-1",
        "finalMessage": "Done.",
        "toolCalls": [{"server": "gateway", "tool": "honcho__search", "status": "error"}],
        "usage": {"inputTokens": 10, "outputTokens": 5, "cachedTokens": 3},
        "costUsd": 0.25,
        "eventsDropped": 0,
    }
    assert SECRET not in result.stdout


def test_a_failed_codex_turn_fails_the_run_with_its_reason(tmp_path):
    lines = [
        {"type": "thread.started", "thread_id": "th-1"},
        {"type": "turn.failed", "error": {"message": "unexpected status 401 Unauthorized"}},
    ]
    body = "cat <<'EOF'\n" + "\n".join(json.dumps(line) for line in lines) + "\nEOF\nexit 1"
    result = cli_adapter("codex").execute(
        invocation("codex", {"binary": fake_cli(tmp_path, body)}, agent_home=str(tmp_path))
    )
    assert not result.ok and result.session_id == "th-1"
    assert result.error == "unexpected status 401 Unauthorized"


def test_gemini_stream_events_become_bounded_scrubbed_events(tmp_path):
    lines = [
        {"type": "init", "session_id": "g-1", "model": "gemini-2.5-flash"},
        {"type": "message", "role": "user", "content": "You are Builder."},
        {
            "type": "tool_use",
            "tool_name": "mcp_switchboard_connections_search",
            "tool_id": "t1",
            "parameters": {},
        },
        {"type": "tool_result", "tool_id": "t1", "status": "success", "output": "found"},
        {"type": "tool_use", "tool_name": "mcp_gateway_honcho__search", "tool_id": "t2", "parameters": {}},
        {"type": "tool_result", "tool_id": "t2", "status": "error", "error": {"type": "mcp_tool_error"}},
        {"type": "tool_use", "tool_name": "read_file", "tool_id": "t3", "parameters": {}},
        {"type": "tool_result", "tool_id": "t3", "status": "success", "output": "..."},
        {"type": "error", "severity": "warning", "message": "Retrying the request."},
        {"type": "message", "role": "assistant", "content": "Done, ", "delta": True},
        {"type": "message", "role": "assistant", "content": f"my key is {SECRET}.", "delta": True},
        {
            "type": "result",
            "status": "success",
            "stats": {
                "total_tokens": 18,
                "input_tokens": 10,
                "output_tokens": 5,
                "cached": 3,
                "tool_calls": 3,
            },
        },
    ]
    body = "cat <<'EOF'\n" + "\n".join(json.dumps(line) for line in lines) + "\nnot json\nEOF"
    result = cli_adapter("gemini").execute(
        invocation("gemini", {"binary": fake_cli(tmp_path, body)}, agent_home=str(tmp_path))
    )
    assert result.ok and result.session_id == "g-1"
    calls = [
        {"server": "switchboard", "tool": "connections_search", "status": "ok"},
        {"server": "gateway", "tool": "honcho__search", "status": "error"},
        {"server": None, "tool": "read_file", "status": "ok"},
    ]
    usage = {"inputTokens": 10, "outputTokens": 5, "cachedTokens": 3}
    assert result.events == [
        {"type": "session", "sessionId": "g-1"},
        *({"type": "tool_call", **call} for call in calls),
        {"type": "message", "text": "Done, my key is [redacted]."},
        {"type": "result", "ok": True, "usage": usage, "costUsd": None},
    ]
    assert result.summary == {
        "sessionId": "g-1",
        "finalMessage": "Done, my key is [redacted].",
        "toolCalls": calls,
        "usage": usage,
        "costUsd": None,
        "eventsDropped": 0,
    }
    assert SECRET not in result.stdout


def test_a_failed_gemini_turn_fails_the_run_with_its_reason(tmp_path):
    lines = [
        {"type": "init", "session_id": "g-2", "model": "gemini-2.5-flash"},
        {
            "type": "result",
            "status": "error",
            "error": {"type": "FatalAuthenticationError", "message": "API key not valid."},
            "stats": {"input_tokens": 0, "output_tokens": 0},
        },
    ]
    body = "cat <<'EOF'\n" + "\n".join(json.dumps(line) for line in lines) + "\nEOF\nexit 41"
    result = cli_adapter("gemini").execute(
        invocation("gemini", {"binary": fake_cli(tmp_path, body)}, agent_home=str(tmp_path))
    )
    assert not result.ok and result.session_id == "g-2" and result.exit_code == 41
    assert result.error == "API key not valid."
    assert result.events[-2:] == [
        {"type": "error", "message": "API key not valid."},
        {"type": "result", "ok": False, "usage": {}, "costUsd": None},
    ]
