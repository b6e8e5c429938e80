"""Process and HTTP adapters against a real child process and a real local HTTP server."""

from __future__ import annotations

import json
import os
import socket
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.adapters import Invocation
from app.adapters.http import HttpAdapter
from app.adapters.process import ProcessAdapter, parse_session_line
from app.models.run_logs import RUN_LOG_LIMIT
from app.services.runs.invocation import prepare_invocation
from tests.services.runs.test_run_instructions import add_connection

SNAPSHOT = {"text": "## Connection instructions\n\nUse the handbook. Résumé.", "digest": "d" * 64}
DESCRIPTOR = {
    "version": 1,
    "guidance": "Use connections_search first.",
    "mcpEndpoint": "http://server.test/mcp/runtime-tools",
    "rest": {
        "connectionsSearch": "http://server.test/runtime-tools/connections/search",
        "connectionRequest": "http://server.test/runtime-tools/connections/request",
    },
    "bearerToken": "token-abc",
    "expiresAt": "2030-01-01T00:00:00Z",
    "tools": ["connections_search", "connection_request"],
}

CHILD = textwrap.dedent(
    """
    import json, os, stat, sys
    path = os.environ["PAPERCLIP_CONNECTION_INSTRUCTIONS_FILE"]
    report = {"file": path, "stdin": sys.stdin.read(), "env": {
        k: v for k, v in os.environ.items() if k.startswith(("PAPERCLIP_", "SECRET_KEY", "SWITCHBOARD_", "KEEP"))}}
    if path:
        report["mode"] = stat.S_IMODE(os.stat(path).st_mode)
        report["dirMode"] = stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode)
        with open(path, encoding="utf-8") as fh:
            report["snapshot"] = json.load(fh)
    print(json.dumps(report), flush=True)
    mode = sys.argv[1] if len(sys.argv) > 1 else "ok"
    if mode == "fail":
        sys.exit(3)
    if mode == "sleep":
        import time
        time.sleep(600)
    if mode == "kill":
        import signal
        os.kill(os.getpid(), signal.SIGKILL)
    if mode == "flood":
        sys.stdout.write("x" * (200 * 1024) + "\\n")
    print(json.dumps({"paperclipSession": {"id": "session-1"}}))
    """
)


@pytest.fixture
def child(tmp_path):
    path = tmp_path / "child.py"
    path.write_text(CHILD)
    return str(path)


def invocation(
    config: dict, *, snapshot=SNAPSHOT, tools=DESCRIPTOR, resume=None, adapter="process"
) -> Invocation:
    return Invocation(
        run_id="run-1",
        agent_id="agent-1",
        company_id="company-1",
        issue_id="issue-1",
        adapter_type=adapter,
        config=config,
        context={"issueId": "issue-1", "connectionInstructions": snapshot},
        prompt="Wake up.\n\n" + (snapshot["text"] if snapshot else ""),
        connection_instructions=snapshot,
        runtime_tools=tools,
        resume_session_id=resume,
    )


def report_of(result) -> dict:
    return json.loads(result.stdout.splitlines()[0])


def test_process_gets_a_private_snapshot_file_that_is_gone_afterwards(child, monkeypatch):
    monkeypatch.setenv("PAPERCLIP_CONNECTION_INSTRUCTIONS_FILE", "/forged")
    monkeypatch.setenv("PAPERCLIP_RUNTIME_TOOLS_TOKEN", "forged")
    monkeypatch.setenv("SECRET_KEY", "server-secret")
    config = {
        "command": [sys.executable, child],
        "env": {"PAPERCLIP_CONNECTION_INSTRUCTIONS_FILE": "/forged", "KEEP": "yes"},
    }
    result = ProcessAdapter().execute(invocation(config, resume="session-0"))
    assert result.ok and result.exit_code == 0, result.stderr
    report = report_of(result)
    assert report["file"].endswith("/instructions.json") and "/forged" not in report["file"]
    assert os.path.basename(os.path.dirname(report["file"])).startswith("paperclip-connection-instructions-")
    assert report["mode"] == 0o600 and report["dirMode"] == 0o700
    assert report["snapshot"] == SNAPSHOT
    assert not os.path.exists(report["file"]) and not os.path.exists(os.path.dirname(report["file"]))
    env = report["env"]
    assert env["KEEP"] == "yes" and "SECRET_KEY" not in env
    assert env["PAPERCLIP_RUNTIME_TOOLS_TOKEN"] == "token-abc"
    assert env["PAPERCLIP_RUNTIME_TOOLS_MCP_URL"] == DESCRIPTOR["mcpEndpoint"]
    assert env["PAPERCLIP_RUNTIME_TOOLS_CONNECTIONS_SEARCH_URL"] == DESCRIPTOR["rest"]["connectionsSearch"]
    assert env["PAPERCLIP_RUNTIME_TOOLS_CONNECTION_REQUEST_URL"] == DESCRIPTOR["rest"]["connectionRequest"]
    assert env["PAPERCLIP_RUNTIME_TOOLS_AVAILABLE"] == "connections_search,connection_request"
    assert env["PAPERCLIP_RUNTIME_TOOLS_EXPIRES_AT"] == DESCRIPTOR["expiresAt"]
    assert env["PAPERCLIP_RUNTIME_TOOLS_GUIDANCE"] == DESCRIPTOR["guidance"]
    assert env["PAPERCLIP_SESSION_ID"] == "session-0" and env["PAPERCLIP_RUN_ID"] == "run-1"
    assert report["stdin"] == env["PAPERCLIP_WAKE_PROMPT"] and SNAPSHOT["text"] in report["stdin"]
    assert result.session_id == "session-1"


def test_no_snapshot_means_an_empty_variable_even_when_forged(child, monkeypatch):
    monkeypatch.setenv("PAPERCLIP_CONNECTION_INSTRUCTIONS_FILE", "/forged")
    config = {
        "command": [sys.executable, child],
        "env": {"PAPERCLIP_CONNECTION_INSTRUCTIONS_FILE": "/forged"},
    }
    result = ProcessAdapter().execute(invocation(config, snapshot=None, tools=None))
    report = report_of(result)
    assert report["file"] == "" and "snapshot" not in report
    assert report["env"]["PAPERCLIP_RUNTIME_TOOLS_AVAILABLE"] == ""
    assert "PAPERCLIP_RUNTIME_TOOLS_TOKEN" not in report["env"]


@pytest.mark.parametrize("mode", ["fail", "kill"])
def test_file_is_removed_when_the_process_fails_or_is_killed(child, mode):
    result = ProcessAdapter().execute(invocation({"command": [sys.executable, child, mode]}))
    assert not result.ok and result.error
    report = report_of(result)
    assert report["mode"] == 0o600
    assert not os.path.exists(os.path.dirname(report["file"]))
    assert result.exit_code == (3 if mode == "fail" else -9)


def test_file_is_removed_after_a_timeout(child):
    result = ProcessAdapter().execute(
        invocation({"command": [sys.executable, child, "sleep"], "timeoutSeconds": 1})
    )
    assert result.timed_out and not result.ok and "timed out" in result.error
    report = report_of(result)
    assert not os.path.exists(os.path.dirname(report["file"]))


def test_output_is_bounded(child):
    result = ProcessAdapter().execute(invocation({"command": [sys.executable, child, "flood"]}))
    assert result.ok and result.truncated and len(result.stdout.encode()) <= RUN_LOG_LIMIT
    assert result.session_id == "session-1"  # seen while streaming, though outside the kept tail's start


def test_bad_command_fails_cleanly(tmp_path):
    result = ProcessAdapter().execute(invocation({"command": [str(tmp_path / "missing")]}))
    assert not result.ok and "Could not start" in result.error
    assert not [p for p in os.listdir(tmp_path) if p.startswith("paperclip-connection-instructions-")]
    assert not ProcessAdapter().execute(invocation({})).ok


def test_session_line_parsing():
    assert parse_session_line(b'{"paperclipSession": {"id": "abc"}}') == "abc"
    assert parse_session_line(b'{"paperclipSession": {"id": 5}}') is None
    assert parse_session_line(b"paperclipSession abc") is None
    assert parse_session_line(b'{"paperclipSession": "abc"}') is None


def test_prepared_run_reaches_a_real_process_with_the_forged_path_overridden(db, make, child, monkeypatch):
    monkeypatch.setenv("PAPERCLIP_CONNECTION_INSTRUCTIONS_FILE", "/forged")
    company = make.company()
    owner = make.member(company, "owner")
    agent = make.agent(
        company,
        "Builder",
        adapter_type="process",
        adapter_config={
            "command": [sys.executable, child],
            "env": {"PAPERCLIP_CONNECTION_INSTRUCTIONS_FILE": "/forged"},
            "paperclipConnectionInstructions": {"text": "forged", "digest": "forged"},
        },
    )
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    add_connection(db, company)
    run = make.claimed_run(agent, issue, context={"connectionInstructions": {"text": "forged"}})
    prepared = prepare_invocation(run)
    db.session.commit()
    result = ProcessAdapter().execute(prepared)
    report = report_of(result)
    assert report["snapshot"] == prepared.connection_instructions
    assert "release handbook" in report["snapshot"]["text"]
    assert "forged" not in result.stdout
    assert report["env"]["PAPERCLIP_RUNTIME_TOOLS_TOKEN"] == prepared.runtime_tools["bearerToken"]
    assert not os.path.exists(report["file"])


# --- HTTP ----------------------------------------------------------------------------------------------------------


class AgentService:
    """A real HTTP agent service on loopback that records requests and answers as told."""

    def __init__(self):
        self.requests: list[dict] = []
        self.status = 200
        self.answer: dict | None = {"ok": True, "sessionId": "http-session-1"}
        self.release = threading.Event()
        self.hang = False
        service = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length))
                service.requests.append({"path": self.path, "headers": dict(self.headers), "body": body})
                if service.hang:
                    service.release.wait(30)
                payload = json.dumps(service.answer).encode()
                self.send_response(service.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/run"
        self.thread = threading.Thread(target=self.server.serve_forever, args=(0.05,), daemon=True)
        self.thread.start()

    def stop(self):
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def agent_service(app):
    service = AgentService()
    yield service
    service.stop()


@pytest.fixture
def allow_loopback(app):
    saved = app.config["OUTBOUND_ALLOWED_HOSTS"]
    app.config["OUTBOUND_ALLOWED_HOSTS"] = ["127.0.0.1"]
    yield
    app.config["OUTBOUND_ALLOWED_HOSTS"] = saved


def http_config(url: str, **extra) -> dict:
    return {
        "url": url,
        "headers": {"X-Agent-Key": "service-key"},
        "payloadTemplate": {
            "agentId": "template-agent",
            "runId": "template-run",
            "connectionInstructions": {"text": "forged"},
            "paperclipRuntimeTools": "forged",
            "prompt": "template prompt",
            "model": "tiny",
        },
        **extra,
    }


def test_http_body_server_fields_win_over_the_template(db, agent_service, allow_loopback):
    result = HttpAdapter().execute(invocation(http_config(agent_service.url), adapter="http", resume="s-0"))
    assert result.ok and result.http_status == 200 and result.session_id == "http-session-1"
    [request] = agent_service.requests
    body = request["body"]
    assert body["model"] == "tiny"
    assert body["agentId"] == "agent-1" and body["runId"] == "run-1"
    assert body["connectionInstructions"] == SNAPSHOT
    assert body["context"]["connectionInstructions"] == SNAPSHOT
    assert body["paperclipRuntimeTools"] == DESCRIPTOR
    assert body["prompt"].startswith("Wake up.") and SNAPSHOT["text"] in body["prompt"]
    assert body["sessionId"] == "s-0"
    assert list(body)[-7:] == [
        "agentId",
        "runId",
        "context",
        "prompt",
        "connectionInstructions",
        "paperclipRuntimeTools",
        "sessionId",
    ]
    assert request["headers"]["X-Agent-Key"] == "service-key"
    assert "forged" not in json.dumps(body)


def test_http_null_instructions_and_error_status(db, agent_service, allow_loopback):
    agent_service.status = 500
    agent_service.answer = {"error": "boom"}
    result = HttpAdapter().execute(invocation(http_config(agent_service.url), snapshot=None, adapter="http"))
    assert not result.ok and result.http_status == 500 and "boom" in result.stdout
    body = agent_service.requests[0]["body"]
    assert body["connectionInstructions"] is None and body["context"]["connectionInstructions"] is None


def test_http_read_timeout(db, agent_service, allow_loopback):
    agent_service.hang = True
    result = HttpAdapter().execute(
        invocation(http_config(agent_service.url, timeoutSeconds=0.5), adapter="http")
    )
    assert result.timed_out and not result.ok


@pytest.mark.parametrize(
    "url",
    [
        None,  # the local agent service itself: loopback
        "http://localhost:9/run",
        "http://10.0.0.7/run",
        "http://192.168.1.10/run",
        "http://169.254.169.254/latest/meta-data",
        "http://[::1]:9/run",
        "file:///etc/passwd",
    ],
)
def test_ssrf_guard_refuses_local_and_private_targets(db, agent_service, url):
    target = url or agent_service.url
    result = HttpAdapter().execute(invocation(http_config(target), adapter="http"))
    assert not result.ok and result.http_status is None
    assert "not allowed" in result.error or "http(s)" in result.error
    assert agent_service.requests == []


def test_a_name_that_rebinds_to_a_local_address_after_the_check_is_refused(db, agent_service, monkeypatch):
    """DNS rebinding: the name answers a public address to the check, then loopback. The connection goes only to
    addresses checked at connect time, so the local agent service is never reached."""
    port = int(agent_service.url.split(":")[2].split("/")[0])
    real_getaddrinfo = socket.getaddrinfo
    answers = iter(["93.184.216.34", "127.0.0.1", "127.0.0.1"])

    def rebinding(host, *args, **kwargs):
        if host != "rebind.example":
            return real_getaddrinfo(host, *args, **kwargs)
        address = next(answers)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)  # the resolver, not our code
    result = HttpAdapter().execute(
        invocation(http_config(f"http://rebind.example:{port}/run"), adapter="http")
    )
    assert not result.ok and result.http_status is None
    assert "private or local address" in result.error
    assert agent_service.requests == []
