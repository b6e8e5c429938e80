"""The scripted model server (tests/peers/model_server.py), and the real agent CLIs driven against it.

The wire tests talk to the server over HTTP like a client library would. The CLI tests run the real Claude Code and
Codex binaries (installed by `make peers`; skipped with the reason when absent) in private config dirs, against the
server and a real MCP server (official SDK) that wants a bearer token the CLI reads from an environment variable.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp.server.mcpserver.exceptions import ToolError

from tests.peers.agent_clis import INSTALL_HINT, claude_binary, codex_binary, gemini_command
from tests.peers.mcp_servers import RunningMcpServer
from tests.peers.model_server import (
    ANTHROPIC,
    GEMINI,
    NO_RULE,
    RESPONSES,
    Rule,
    ScriptedModelServer,
    Text,
    ToolCall,
    last_tool_result_from,
    no_tool_result_yet,
    user_text_contains,
)

CLI_TIMEOUT = 90
TOKEN = "runtime-token-7f3a"
TOKEN_VAR = "SB_RUNTIME_TOKEN"
FINAL = "Found the CRM connection: crm-app."
CALLS = [("connections_search", {"query": "crm"}), ("connection_request", {"app": "nope"})]
APPEND_MARKER = "SWITCHBOARD-APPENDED-INSTRUCTIONS: use connections_search first."

requires_claude = pytest.mark.skipif(claude_binary() is None, reason=INSTALL_HINT)
requires_codex = pytest.mark.skipif(codex_binary() is None, reason=INSTALL_HINT)
requires_gemini = pytest.mark.skipif(
    gemini_command() is None, reason=f"{INSTALL_HINT}; Gemini CLI needs node >= 20"
)


# -- the wire, without a CLI ---------------------------------------------------------------------------------


def _post(url: str, body: dict[str, Any]) -> tuple[str, bytes]:
    headers = {"x-api-key": "sk-secret"}
    response = httpx.post(url, json=body, headers=headers, timeout=10)
    response.raise_for_status()
    return response.headers["content-type"], response.content


def _sse_events(payload: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in payload.decode().strip().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines())
        events.append((lines["event"], json.loads(lines["data"])))
    return events


TOOLS = [
    {"name": "Bash", "input_schema": {}},
    {"name": "mcp__runtime__connections_search", "input_schema": {}},
]


def test_anthropic_stream_calls_the_offered_tool_by_suffix_then_answers():
    script = [
        Rule(no_tool_result_yet, ToolCall("connections_search", {"query": "crm"})),
        Rule(last_tool_result_from("connections_search"), Text(FINAL)),
    ]
    with ScriptedModelServer(script) as server:
        first = {
            "model": "m",
            "stream": True,
            "system": "SYS",
            "tools": TOOLS,
            "messages": [{"role": "user", "content": "find crm"}],
        }
        content_type, payload = _post(server.url + "/v1/messages?beta=true", first)
        assert content_type.startswith("text/event-stream")
        events = _sse_events(payload)
        kinds = [kind for kind, _ in events]
        assert kinds == [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
        block = events[2][1]["content_block"]
        assert block["type"] == "tool_use" and block["name"] == "mcp__runtime__connections_search"
        assert json.loads(events[3][1]["delta"]["partial_json"]) == {"query": "crm"}
        assert events[5][1]["delta"]["stop_reason"] == "tool_use"
        assert events[5][1]["usage"]["output_tokens"] > 0
        assert events[0][1]["message"]["usage"]["input_tokens"] > 0

        second = dict(
            first,
            stream=False,
            messages=[
                {"role": "user", "content": "find crm"},
                {
                    "role": "assistant",
                    "content": [
                        {
                            "type": "tool_use",
                            "id": block["id"],
                            "name": block["name"],
                            "input": {"query": "crm"},
                        }
                    ],
                },
                {
                    "role": "user",
                    "content": [
                        {
                            "type": "tool_result",
                            "tool_use_id": block["id"],
                            "content": [{"type": "text", "text": "crm-app"}],
                        }
                    ],
                },
            ],
        )
        content_type, payload = _post(server.url + "/v1/messages", second)
        message = json.loads(payload)
        assert content_type == "application/json"
        assert message["content"] == [{"type": "text", "text": FINAL}]
        assert message["stop_reason"] == "end_turn"

        main = server.main_requests()
        assert len(main) == 2 and server.side_requests() == []
        assert main[0].conversation is not None and main[0].conversation.system == "SYS"
        assert main[0].headers["x-api-key"] == "<redacted>"
        [result] = server.tool_results("connections_search")
        assert (result.tool_name, result.text, result.is_error) == (
            "mcp__runtime__connections_search",
            "crm-app",
            False,
        )


def test_requests_without_tools_are_side_requests_and_unmatched_or_unoffered_replies_say_so():
    script = [
        Rule(user_text_contains("missing"), ToolCall("no_such_tool")),
        Rule(user_text_contains("zzz"), Text("x")),
    ]
    with ScriptedModelServer(script, side_reply="A title") as server:
        side = {"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "title this"}]}
        assert json.loads(_post(server.url + "/v1/messages", side)[1])["content"][0]["text"] == "A title"
        unmatched = dict(side, tools=TOOLS)
        assert json.loads(_post(server.url + "/v1/messages", unmatched)[1])["content"][0]["text"] == NO_RULE
        missing = dict(side, tools=TOOLS, messages=[{"role": "user", "content": "missing tool"}])
        text = json.loads(_post(server.url + "/v1/messages", missing)[1])["content"][0]["text"]
        assert text == (
            "SCRIPT ERROR: no offered tool matches 'no_such_tool'; offered: Bash, mcp__runtime__connections_search"
        )
        assert json.loads(_post(server.url + "/v1/messages/count_tokens", side)[1])["input_tokens"] > 0
        assert [r.kind for r in server.requests] == ["side", "main", "main", "other"]


def test_responses_stream_calls_a_namespaced_tool_then_answers():
    tools = [
        {"type": "function", "name": "exec_command", "parameters": {}},
        {
            "type": "namespace",
            "name": "mcp__runtime",
            "tools": [{"type": "function", "name": "connections_search"}],
        },
    ]
    script = [
        Rule(no_tool_result_yet, ToolCall("connections_search", {"query": "crm"})),
        Rule(last_tool_result_from("connections_search"), Text(FINAL)),
    ]
    with ScriptedModelServer(script) as server:
        user = {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "find crm"}]}
        developer = {
            "type": "message",
            "role": "developer",
            "content": [{"type": "input_text", "text": "DEV"}],
        }
        first = {"model": "gpt-test", "stream": True, "tools": tools, "input": [developer, user]}
        events = _sse_events(_post(server.url + "/v1/responses", first)[1])
        assert [kind for kind, _ in events] == [
            "response.created",
            "response.in_progress",
            "response.output_item.added",
            "response.function_call_arguments.delta",
            "response.function_call_arguments.done",
            "response.output_item.done",
            "response.completed",
        ]
        item = events[5][1]["item"]
        assert (item["type"], item["namespace"], item["name"]) == (
            "function_call",
            "mcp__runtime",
            "connections_search",
        )
        assert json.loads(item["arguments"]) == {"query": "crm"}
        assert events[6][1]["response"]["usage"]["total_tokens"] > 0

        call = {k: item[k] for k in ("type", "namespace", "name", "arguments", "call_id")}
        output = {"type": "function_call_output", "call_id": item["call_id"], "output": "crm-app"}
        events = _sse_events(
            _post(server.url + "/v1/responses", dict(first, input=[developer, user, call, output]))[1]
        )
        assert [kind for kind, _ in events][2:] == [
            "response.output_item.added",
            "response.content_part.added",
            "response.output_text.delta",
            "response.output_text.done",
            "response.content_part.done",
            "response.output_item.done",
            "response.completed",
        ]
        assert events[-1][1]["response"]["output"][0]["content"][0]["text"] == FINAL
        conversation = server.main_requests()[1].conversation
        assert conversation is not None
        assert (conversation.api, conversation.system, conversation.user_texts) == (
            RESPONSES,
            "DEV",
            ["find crm"],
        )
        [result] = server.tool_results("connections_search")
        assert (result.tool_name, result.text) == ("mcp__runtime__connections_search", "crm-app")


def test_gemini_stream_calls_a_prefixed_tool_then_answers():
    script = [
        Rule(no_tool_result_yet, ToolCall("connections_search", {"query": "crm"})),
        Rule(last_tool_result_from("connections_search"), Text(FINAL)),
    ]
    with ScriptedModelServer(script) as server:
        url = server.url + "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
        declarations = [{"name": "read_file"}, {"name": "mcp_runtime_connections_search"}]
        user = {"role": "user", "parts": [{"text": "find crm"}]}
        first = {
            "contents": [user],
            "systemInstruction": {"parts": [{"text": "SYS"}]},
            "tools": [{"functionDeclarations": declarations}],
        }
        content_type, payload = _post(url, first)
        assert content_type.startswith("text/event-stream")
        [chunk] = [
            json.loads(line[6:]) for line in payload.decode().splitlines() if line.startswith("data: ")
        ]
        parts = chunk["candidates"][0]["content"]["parts"]
        assert parts == [
            {"functionCall": {"name": "mcp_runtime_connections_search", "args": {"query": "crm"}}}
        ]
        assert chunk["usageMetadata"]["totalTokenCount"] > 0

        call = {"role": "model", "parts": parts}
        response = {
            "functionResponse": {"name": "mcp_runtime_connections_search", "response": {"output": "crm-app"}}
        }
        _, payload = _post(url, dict(first, contents=[user, call, {"role": "user", "parts": [response]}]))
        [chunk] = [
            json.loads(line[6:]) for line in payload.decode().splitlines() if line.startswith("data: ")
        ]
        assert chunk["candidates"][0]["content"]["parts"] == [{"text": FINAL}]
        conversation = server.main_requests()[1].conversation
        assert conversation is not None
        assert (conversation.api, conversation.model, conversation.system) == (
            GEMINI,
            "gemini-2.5-flash",
            "SYS",
        )
        [result] = server.tool_results("connections_search")
        assert (result.tool_name, result.text, result.is_error) == (
            "mcp_runtime_connections_search",
            "crm-app",
            False,
        )


# -- the real CLIs -------------------------------------------------------------------------------------------


@pytest.fixture
def runtime_mcp():
    """A real MCP server (official SDK) wanting `Authorization: Bearer TOKEN`, with one tool, connections_search."""
    server = RunningMcpServer("runtime", required_key=TOKEN)

    def connections_search(query: str) -> str:
        """Search the connections the agent may use."""
        server.record_call("connections_search", {"query": query})
        return f"connections matching {query}: crm-app"

    def connection_request(app: str) -> str:
        """Ask for a connection to an app."""
        server.record_call("connection_request", {"app": app})
        raise ToolError(f"no app named {app}")

    server.add_tool(connections_search, read_only=True)
    server.add_tool(connection_request, read_only=False, destructive=False)
    server.start()
    yield server
    server.stop()


def _mcp_script() -> list[Rule]:
    return [
        Rule(user_text_contains("again"), Text("Second turn answer.")),
        Rule(no_tool_result_yet, ToolCall("connections_search", {"query": "crm"})),
        Rule(last_tool_result_from("connections_search"), ToolCall("connection_request", {"app": "nope"})),
        Rule(last_tool_result_from("connection_request"), Text(FINAL)),
    ]


def _assert_mcp_call_reached_both_ends(model: ScriptedModelServer, mcp: RunningMcpServer) -> None:
    assert mcp.calls == CALLS
    # The token came from the CLI's environment: every request the MCP server saw carried exactly that bearer.
    assert mcp.requests and {r.auth for r in mcp.requests} == {"ok"}
    [result] = model.tool_results("connections_search")
    assert "connections matching crm: crm-app" in result.text
    assert not result.is_error
    [failed] = model.tool_results("connection_request")
    assert "no app named nope" in failed.text
    # Claude Code and Gemini CLI mark a failed MCP call as an error; Codex sends it as plain output text.
    conversation = model.main_requests()[0].conversation
    assert conversation is not None
    assert failed.is_error is (conversation.api != RESPONSES)


def _jsonl(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def _base_env(home: Path) -> dict[str, str]:
    """A clean environment: nothing of the test run's own (no keys), HOME and TMPDIR private to the test."""
    (home / "tmp").mkdir(exist_ok=True)
    path = os.environ.get("PATH", "/usr/bin:/bin")
    return {"PATH": path, "HOME": str(home), "TMPDIR": str(home / "tmp"), "LANG": "C.UTF-8"}


def _run(cmd: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    process = subprocess.run(
        cmd, env=env, cwd=cwd, capture_output=True, text=True, timeout=CLI_TIMEOUT, stdin=subprocess.DEVNULL
    )
    assert process.returncode == 0, (
        f"{cmd[0]} exited {process.returncode}\n{process.stdout[-3000:]}\n{process.stderr[-3000:]}"
    )
    return process


def _claude(
    home: Path, model: ScriptedModelServer, mcp: RunningMcpServer, *args: str, tool_search: bool = True
):
    config = home / "mcp.json"
    if not config.exists():
        # `${VAR}` is expanded by Claude Code from its own environment: the file never holds the token.
        server = {"type": "http", "url": mcp.url, "headers": {"Authorization": f"Bearer ${{{TOKEN_VAR}}}"}}
        config.write_text(json.dumps({"mcpServers": {"runtime": server}}))
    env = _base_env(home) | {
        "CLAUDE_CONFIG_DIR": str(home / "claude"),
        "ANTHROPIC_BASE_URL": model.url,
        "ANTHROPIC_API_KEY": "sk-test",
        "DISABLE_TELEMETRY": "1",
        "DISABLE_ERROR_REPORTING": "1",
        "DISABLE_AUTOUPDATER": "1",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CODE_MAX_RETRIES": "0",
        TOKEN_VAR: TOKEN,
    }
    if not tool_search:
        env["ENABLE_TOOL_SEARCH"] = "false"
    binary = claude_binary()
    assert binary is not None
    cmd = [binary, "-p", "--output-format", "stream-json", "--verbose", "--model", "claude-sonnet-4-5"]
    cmd += ["--mcp-config", str(config), "--strict-mcp-config", "--allowedTools", "mcp__runtime", *args]
    return _jsonl(_run(cmd, env, home).stdout)


@requires_claude
@pytest.mark.parametrize("tool_search", [True, False], ids=["deferred-tools", "tool-search-off"])
def test_claude_calls_the_mcp_tool_with_the_bearer_from_env_then_resumes(tmp_path, runtime_mcp, tool_search):
    (tmp_path / "append.md").write_text(APPEND_MARKER)
    with ScriptedModelServer(_mcp_script()) as model:
        args = ["--append-system-prompt-file", str(tmp_path / "append.md"), "--", "Find the CRM connection."]
        events = _claude(tmp_path, model, runtime_mcp, *args, tool_search=tool_search)

        _assert_mcp_call_reached_both_ends(model, runtime_mcp)
        init, result = events[0], events[-1]
        assert (init["type"], init["subtype"]) == ("system", "init")
        assert {"name": "runtime", "status": "connected"}.items() <= init["mcp_servers"][0].items()
        session_id = init["session_id"]
        assert (result["type"], result["subtype"], result["is_error"]) == ("result", "success", False)
        assert (result["session_id"], result["result"]) == (session_id, FINAL)
        assert result["usage"]["input_tokens"] > 0 and result["usage"]["output_tokens"] > 0
        tool_uses = [
            block
            for event in events
            if event["type"] == "assistant"
            for block in event["message"]["content"]
            if block["type"] == "tool_use"
        ]
        assert [block["name"] for block in tool_uses if block["name"] != "ToolSearch"] == [
            "mcp__runtime__connections_search",
            "mcp__runtime__connection_request",
        ]
        main = model.main_requests()
        assert all(r.conversation and r.conversation.api == ANTHROPIC for r in main)
        assert all(APPEND_MARKER in r.conversation.system for r in main if r.conversation)
        assert main[0].path == "/v1/messages?beta=true"
        assert main[0].headers["x-claude-code-session-id"] == session_id

        first_turn = len(main)
        events = _claude(tmp_path, model, runtime_mcp, "--resume", session_id, "--", "Now say it again.")
        assert events[-1]["result"] == "Second turn answer."
        assert events[-1]["session_id"] == session_id
        resumed = model.main_requests()[first_turn].conversation
        assert resumed is not None
        assert "Find the CRM connection." in resumed.user_texts[0]
        assert FINAL in resumed.assistant_texts
        assert [r.tool_name for r in resumed.tool_results if r.tool_name != "ToolSearch"] == [
            "mcp__runtime__connections_search",
            "mcp__runtime__connection_request",
        ]
        assert "Now say it again." in resumed.user_texts[-1]
        assert runtime_mcp.calls == CALLS


CODEX_CONFIG = """\
model = "gpt-test"
model_provider = "scripted"
approval_policy = "never"
sandbox_mode = "read-only"
check_for_update_on_startup = false

[analytics]
enabled = false

[feedback]
enabled = false

[otel]
exporter = "none"

[model_providers.scripted]
name = "scripted"
base_url = "{model_url}/v1"
wire_api = "responses"
env_key = "SB_MODEL_KEY"
request_max_retries = 0
stream_max_retries = 0

[mcp_servers.runtime]
url = "{mcp_url}"
bearer_token_env_var = "{token_var}"
default_tools_approval_mode = "approve"

[features]
plugins = false
remote_plugin = false
plugin_sharing = false
apps = false
skill_mcp_dependency_install = false
api_key_model_discovery = false
in_app_updates = false
tool_suggest = false
browser_use = false
browser_use_external = false
computer_use = false
image_generation = false
daemon_auto_start = false
"""


def _codex(home: Path, model: ScriptedModelServer, mcp: RunningMcpServer, *args: str) -> list[dict[str, Any]]:
    codex_home = home / "codex"
    codex_home.mkdir(exist_ok=True)
    config = CODEX_CONFIG.format(model_url=model.url, mcp_url=mcp.url, token_var=TOKEN_VAR)
    (codex_home / "config.toml").write_text(config)
    env = _base_env(home) | {"CODEX_HOME": str(codex_home), "SB_MODEL_KEY": "sk-test", TOKEN_VAR: TOKEN}
    binary = codex_binary()
    assert binary is not None
    return _jsonl(_run([binary, "exec", *args], env, home).stdout)


@requires_codex
def test_codex_calls_the_mcp_tool_with_the_bearer_from_env_then_resumes(tmp_path, runtime_mcp):
    with ScriptedModelServer(_mcp_script()) as model:
        developer = f"developer_instructions={json.dumps(APPEND_MARKER)}"
        flags = ["--json", "--skip-git-repo-check", "-c", developer]
        events = _codex(tmp_path, model, runtime_mcp, *flags, "Find the CRM connection.")

        _assert_mcp_call_reached_both_ends(model, runtime_mcp)
        assert events[0]["type"] == "thread.started"
        thread_id = events[0]["thread_id"]
        items = [event["item"] for event in events if event["type"] == "item.completed"]
        calls = [item for item in items if item["type"] == "mcp_tool_call"]
        [call, failed] = calls
        assert (call["server"], call["tool"], call["arguments"], call["status"]) == (
            "runtime",
            "connections_search",
            {"query": "crm"},
            "completed",
        )
        assert call["error"] is None
        assert call["result"]["content"] == [{"type": "text", "text": "connections matching crm: crm-app"}]
        # An MCP result with isError: status "failed", the text in result (not in error).
        assert (failed["tool"], failed["status"], failed["error"]) == ("connection_request", "failed", None)
        assert failed["result"]["content"] == [
            {"type": "text", "text": "Error executing tool connection_request: no app named nope"}
        ]
        assert [item["text"] for item in items if item["type"] == "agent_message"] == [FINAL]
        assert events[-1]["type"] == "turn.completed"
        assert events[-1]["usage"]["input_tokens"] > 0 and events[-1]["usage"]["output_tokens"] > 0
        main = model.main_requests()
        assert all(r.conversation and r.conversation.api == RESPONSES for r in main)
        assert all(APPEND_MARKER in r.conversation.system for r in main if r.conversation)
        assert main[0].headers["session-id"] == thread_id
        assert "mcp__runtime__connections_search" in (
            main[0].conversation.tools if main[0].conversation else ()
        )

        first_turn = len(main)
        events = _codex(
            tmp_path,
            model,
            runtime_mcp,
            "resume",
            thread_id,
            "--json",
            "--skip-git-repo-check",
            "Now say it again.",
        )
        assert events[0] == {"type": "thread.started", "thread_id": thread_id}
        messages = [
            e["item"]["text"]
            for e in events
            if e["type"] == "item.completed" and e["item"]["type"] == "agent_message"
        ]
        assert messages == ["Second turn answer."]
        resumed = model.main_requests()[first_turn].conversation
        assert resumed is not None
        assert "Find the CRM connection." in resumed.user_texts
        assert FINAL in resumed.assistant_texts
        assert [r.tool_name for r in resumed.tool_results] == [
            "mcp__runtime__connections_search",
            "mcp__runtime__connection_request",
        ]
        assert resumed.user_texts[-1] == "Now say it again."
        assert runtime_mcp.calls == CALLS


def test_non_streaming_responses_probes_and_unknown_paths():
    with ScriptedModelServer([Rule(user_text_contains("hi"), Text("hello there"))]) as server:
        body = {"model": "gpt-test", "input": "hi", "tools": [{"type": "function", "name": "exec_command"}]}
        response = httpx.post(server.url + "/v1/responses", json=body, timeout=10).json()
        assert (response["status"], response["output"][0]["content"][0]["text"]) == (
            "completed",
            "hello there",
        )
        assert httpx.head(server.url + "/api/hello", timeout=10).status_code == 200
        assert httpx.get(server.url + "/v1/models", timeout=10).json()["object"] == "list"
        missing = httpx.post(server.url + "/v1/elsewhere", json={}, timeout=10)
        assert missing.status_code == 404
        assert [(r.kind, r.method, r.path) for r in server.requests] == [
            ("main", "POST", "/v1/responses"),
            ("other", "HEAD", "/api/hello"),
            ("other", "GET", "/v1/models"),
            ("other", "POST", "/v1/elsewhere"),
        ]


def _gemini(
    home: Path, model: ScriptedModelServer, mcp: RunningMcpServer, *args: str
) -> list[dict[str, Any]]:
    settings_dir = home / ".gemini"
    settings_dir.mkdir(exist_ok=True)
    # `${VAR}` in settings is expanded by Gemini CLI from its environment; `trust` lets the headless run call the
    # server's tools (without it, or --approval-mode yolo, the MCP tools are not even offered to the model).
    server = {"httpUrl": mcp.url, "headers": {"Authorization": f"Bearer ${{{TOKEN_VAR}}}"}, "trust": True}
    settings = {
        "privacy": {"usageStatisticsEnabled": False},
        "telemetry": {"enabled": False},
        "general": {"disableAutoUpdate": True, "disableUpdateNag": True},
        "security": {"auth": {"selectedType": "gemini-api-key"}},
        "mcpServers": {"runtime": server},
    }
    (settings_dir / "settings.json").write_text(json.dumps(settings))
    (home / "system.md").write_text(APPEND_MARKER)
    env = _base_env(home) | {
        "GEMINI_API_KEY": "sk-test",
        "GOOGLE_GEMINI_BASE_URL": model.url,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",
        "GEMINI_CLI_NO_RELAUNCH": "true",
        "GEMINI_SYSTEM_MD": str(home / "system.md"),
        TOKEN_VAR: TOKEN,
    }
    command = gemini_command()
    assert command is not None
    return _jsonl(_run([*command, "-o", "stream-json", "-m", "gemini-2.5-flash", *args], env, home).stdout)


@requires_gemini
def test_gemini_calls_the_mcp_tool_with_the_bearer_from_env_then_resumes(tmp_path, runtime_mcp):
    with ScriptedModelServer(_mcp_script()) as model:
        events = _gemini(tmp_path, model, runtime_mcp, "-p", "Find the CRM connection.")

        _assert_mcp_call_reached_both_ends(model, runtime_mcp)
        init, result = events[0], events[-1]
        assert init["type"] == "init"
        session_id = init["session_id"]
        tool_uses = [(e["tool_name"], e["parameters"]) for e in events if e["type"] == "tool_use"]
        assert tool_uses == [
            ("mcp_runtime_connections_search", {"query": "crm"}),
            ("mcp_runtime_connection_request", {"app": "nope"}),
        ]
        outcomes = [
            (e["status"], e.get("output"), e.get("error", {}).get("type"))
            for e in events
            if e["type"] == "tool_result"
        ]
        assert outcomes == [
            ("success", "connections matching crm: crm-app", None),
            ("error", "Error: MCP tool 'connection_request' reported an error.", "mcp_tool_error"),
        ]
        assert [e["content"] for e in events if e["type"] == "message" and e["role"] == "assistant"] == [
            FINAL
        ]
        assert (result["type"], result["status"]) == ("result", "success")
        assert result["stats"]["input_tokens"] > 0 and result["stats"]["output_tokens"] > 0
        main = model.main_requests()
        assert all(r.conversation and r.conversation.api == GEMINI for r in main)
        # GEMINI_SYSTEM_MD replaces the whole system instruction with the file's text.
        assert all(r.conversation and r.conversation.system == APPEND_MARKER for r in main)
        assert main[0].headers["x-goog-api-key"] == "<redacted>"

        first_turn = len(model.main_requests())
        events = _gemini(tmp_path, model, runtime_mcp, "--resume", session_id, "-p", "Now say it again.")
        assert events[0]["session_id"] == session_id
        assert [e["content"] for e in events if e["type"] == "message" and e["role"] == "assistant"] == [
            "Second turn answer."
        ]
        resumed = model.main_requests()[first_turn].conversation
        assert resumed is not None
        assert any("Find the CRM connection." in text for text in resumed.user_texts)
        assert FINAL in resumed.assistant_texts
        assert [c.name for c in resumed.tool_calls] == [
            "mcp_runtime_connections_search",
            "mcp_runtime_connection_request",
        ]
        # Gemini CLI 0.61.0 replays each functionResponse of a resumed session twice.
        assert [r.tool_name for r in resumed.tool_results] == [
            "mcp_runtime_connections_search",
            "mcp_runtime_connections_search",
            "mcp_runtime_connection_request",
            "mcp_runtime_connection_request",
        ]
        assert resumed.user_texts[-1] == "Now say it again."
        assert runtime_mcp.calls == CALLS
