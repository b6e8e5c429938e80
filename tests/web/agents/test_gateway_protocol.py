"""`/mcp/gateway` as a current MCP server: revision negotiation, 2026-07-28 requests, errors clients can read,
transport security on both agent doors, and faithful pass-through of providers (listing fields, structured content,
progress, cancellation).

Real clients (the official Python SDK 2.x, legacy and auto/modern modes) against the live server; real provider
peers on loopback.
"""

from __future__ import annotations

import asyncio
import base64
import json
import threading
import time

import httpx
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError

from app.core import mcp_versions
from tests.doors import bearer, refusal_fields, rpc
from tests.peers.mcp_servers import (
    FORECAST_ANNOTATIONS,
    FORECAST_META,
    FORECAST_TITLE,
    NOTES_KEY,
    PROGRESS_STEPS,
    start_frozen_server,
    start_rich_server,
)
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import URL, agent_session, connect

# The gateway tests' fixtures: Acme with a live run (`world`) and the live server's gateway URL.
world = test_gateway.world
live_server = test_gateway.live_server

RUNTIME_URL = "/mcp/runtime-tools"
MODERN = "2026-07-28"
SUPPORTED_NEWEST_FIRST = ["2026-07-28", "2025-11-25", "2025-06-18", "2025-03-26"]
PATIENCE = 30.0  # an upper bound for waiting on another thread; never asserted


def modern_body(method: str, params: dict | None = None, id_=1, version=MODERN) -> dict:
    meta = {
        mcp_versions.META_PROTOCOL_VERSION: version,
        mcp_versions.META_CLIENT_CAPABILITIES: {},
        mcp_versions.META_CLIENT_INFO: {"name": "test", "version": "1"},
    }
    return {"jsonrpc": "2.0", "id": id_, "method": method, "params": {**(params or {}), "_meta": meta}}


def modern_headers(token: str, method: str, name: str | None = None, version: str = MODERN) -> dict:
    headers = {**bearer(token), "MCP-Protocol-Version": version, "Mcp-Method": method}
    if name is not None:
        headers["Mcp-Name"] = name
    return headers


def post(client, token, body, headers=None):
    return client.post(URL, json=body, headers={**bearer(token), **(headers or {})})


# --- negotiation -----------------------------------------------------------------------------------------------


def test_initialize_answers_the_requested_revision_when_supported_else_the_latest(db, world):
    for version in ("2025-03-26", "2025-06-18", "2025-11-25"):
        answer = rpc(
            world.client, world.token, "initialize", {"protocolVersion": version, "capabilities": {}}
        )
        assert answer.status_code == 200 and answer.json["result"]["protocolVersion"] == version
    for other in ("2024-11-05", "2099-01-01", None):
        answer = rpc(world.client, world.token, "initialize", {"protocolVersion": other, "capabilities": {}})
        assert answer.json["result"]["protocolVersion"] == "2025-11-25"
    # The runtime door keeps the seed contract: 2025-03-26 whatever the client asks.
    runtime = world.client.post(
        RUNTIME_URL,
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}},
        headers=bearer(world.token),
    )
    assert runtime.json["result"]["protocolVersion"] == "2025-03-26"


def test_the_protocol_version_header_is_validated(db, world):
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list"}
    for version in ("2025-03-26", "2025-06-18", "2025-11-25"):
        ok = post(world.client, world.token, body, {"MCP-Protocol-Version": version})
        assert ok.status_code == 200 and "tools" in ok.json["result"]
    assert post(world.client, world.token, body).status_code == 200  # absent: 2025-03-26
    refused = post(world.client, world.token, body, {"MCP-Protocol-Version": "1999-01-01"})
    assert refused.status_code == 400
    assert refused.json == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {
            "code": -32022,
            "message": "Unsupported protocol version",
            "data": {"supported": SUPPORTED_NEWEST_FIRST, "requested": "1999-01-01"},
        },
    }


def test_modern_requests_are_served_without_initialize(db, world):
    client, token = world.client, world.token
    discover = post(client, token, modern_body("server/discover"), modern_headers(token, "server/discover"))
    assert discover.status_code == 200
    result = discover.json["result"]
    assert result["resultType"] == "complete"
    assert result["supportedVersions"] == SUPPORTED_NEWEST_FIRST
    assert (result["ttlMs"], result["cacheScope"]) == (0, "private")
    assert result["capabilities"] == {"tools": {"listChanged": True}, "resources": {}}  # subscriptions/listen
    assert result["_meta"][mcp_versions.META_SERVER_INFO]["name"] == "switchboard-tool-gateway"
    listed = post(client, token, modern_body("tools/list"), modern_headers(token, "tools/list"))
    assert listed.status_code == 200 and listed.json["result"]["resultType"] == "complete"
    assert listed.json["result"]["tools"] == []
    # initialize does not exist in 2026-07-28: an unknown method, 404 as that revision prescribes.
    init = post(client, token, modern_body("initialize"), modern_headers(token, "initialize"))
    assert init.status_code == 404 and init.json["error"]["code"] == -32601
    note = client.post(
        URL,
        json={"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}},
        headers=modern_headers(token, "notifications/cancelled"),
    )
    assert note.status_code == 202 and note.get_data() == b""


def test_modern_headers_must_match_the_body(db, world):
    client, token = world.client, world.token
    call = modern_body("tools/call", {"name": "nope__tool", "arguments": {}})

    def code(body, headers):
        response = post(client, token, body, headers)
        return response.status_code, response.json["error"]["code"]

    assert code(call, modern_headers(token, "tools/list", "nope__tool")) == (400, -32020)
    assert code(call, modern_headers(token, "tools/call", "other__tool")) == (400, -32020)
    assert code(call, modern_headers(token, "tools/call")) == (400, -32020)  # Mcp-Name missing
    no_method = {
        k: v for k, v in modern_headers(token, "tools/call", "nope__tool").items() if k != "Mcp-Method"
    }
    assert code(call, no_method) == (400, -32020)
    # A body with the modern _meta but no version header at all; a legacy header decides the era (as in the SDK).
    assert code(call, bearer(token)) == (400, -32020)
    assert code(call, modern_headers(token, "tools/call", "nope__tool", version="2025-11-25")) == (
        200,
        -32602,
    )
    # The envelope must carry the protocol version and the client capabilities.
    bare = {**call, "params": {"name": "nope__tool", "_meta": {mcp_versions.META_PROTOCOL_VERSION: MODERN}}}
    assert code(bare, modern_headers(token, "tools/call", "nope__tool")) == (400, -32602)
    # Mcp-Name in the Base64 sentinel form is decoded before comparing: this one reaches the tool lookup.
    encoded = "=?base64?" + base64.b64encode(b"nope__tool").decode() + "?="
    unknown = post(client, token, call, modern_headers(token, "tools/call", encoded))
    assert unknown.status_code == 200
    assert unknown.json["error"] == {"code": -32602, "message": "Unknown tool: nope__tool"}
    # Legacy clients that send Mcp-Method anyway are held to it too.
    legacy = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    assert code(legacy, {"MCP-Protocol-Version": "2025-11-25", "Mcp-Method": "tools/call"}) == (400, -32020)


def test_batches_only_where_the_revision_has_them(db, world):
    batch = [{"jsonrpc": "2.0", "id": 1, "method": "ping"}, {"jsonrpc": "2.0", "id": 2, "method": "nope"}]
    answered = post(world.client, world.token, batch)
    assert answered.status_code == 200
    assert answered.json == [
        {"jsonrpc": "2.0", "id": 1, "result": {}},
        {"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, "message": "Unknown method: nope"}},
    ]
    for version in ("2025-06-18", "2025-11-25"):
        refused = post(world.client, world.token, batch, {"MCP-Protocol-Version": version})
        assert refused.status_code == 400 and refused.json["error"]["code"] == -32600


def test_request_errors_come_with_http_200_on_the_gateway(db, world):
    unknown_method = rpc(world.client, world.token, "prompts/list")
    assert unknown_method.status_code == 200
    assert unknown_method.json["error"] == {"code": -32601, "message": "Unknown method: prompts/list"}
    missing_name = rpc(world.client, world.token, "tools/call", {"arguments": {}})
    assert missing_name.status_code == 200
    assert missing_name.json["error"] == {"code": -32602, "message": "Unknown tool: missing"}


# --- transport security on both doors ----------------------------------------------------------------------------


@pytest.mark.parametrize("path", [URL, RUNTIME_URL])
def test_foreign_origins_are_refused_and_401_names_the_scheme(app, db, world, path):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    foreign = world.client.post(
        path, json=body, headers={**bearer(world.token), "Origin": "http://evil.example"}
    )
    assert foreign.status_code == 403 and foreign.json["id"] is None
    # Before the token: a rebinding page learns nothing about tokens either.
    assert world.client.post(path, json=body, headers={"Origin": "http://evil.example"}).status_code == 403
    ours = world.client.post(
        path, json=body, headers={**bearer(world.token), "Origin": "http://127.0.0.1:5000"}
    )
    assert ours.status_code == 200
    app.config["AGENT_ALLOWED_ORIGINS"] = ["http://localhost:8080"]
    try:
        allowed = world.client.post(
            path, json=body, headers={**bearer(world.token), "Origin": "http://localhost:8080"}
        )
        assert allowed.status_code == 200
    finally:
        app.config["AGENT_ALLOWED_ORIGINS"] = []
    # RFC 6750 3.1 on the gateway: no credentials sent, no error code, and RFC 9728's pointer to the metadata; the
    # runtime door keeps its contract.
    metadata = 'resource_metadata="http://127.0.0.1:5000/.well-known/oauth-protected-resource/mcp/gateway"'
    for unauthenticated in (world.client.post(path, json=body), world.client.get(path)):
        assert unauthenticated.status_code == 401
        expected = f"Bearer {metadata}" if path == URL else 'Bearer error="invalid_token"'
        assert unauthenticated.headers["WWW-Authenticate"] == expected
    wrong = world.client.post(path, json=body, headers=bearer("not-a-token"))
    expected = f'Bearer error="invalid_token", {metadata}' if path == URL else 'Bearer error="invalid_token"'
    assert wrong.status_code == 401 and wrong.headers["WWW-Authenticate"] == expected
    message = "Runtime tools token is missing, invalid, or expired"
    if path == URL:  # a JSON-RPC error every MCP client can read
        assert wrong.json == {"jsonrpc": "2.0", "id": None, "error": {"code": -32001, "message": message}}
    else:  # the runtime door's contracted body
        assert wrong.json == {"error": message}


def test_unknown_well_known_and_mcp_paths_answer_json_404(db, world):
    for path in (
        "/.well-known/openid-configuration",
        "/.well-known/oauth-protected-resource/mcp/runtime-tools",
    ):
        response = world.client.get(path)
        assert response.status_code == 404 and response.json == {"error": "Not found"}


# --- real clients ----------------------------------------------------------------------------------------------


def _client(url: str, token: str, mode: str) -> Client:
    http = create_mcp_http_client(headers=bearer(token))
    return Client(streamable_http_client(url, http_client=http), mode=mode)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_the_python_sdk_lists_and_calls_and_reads_errors(db, world, live_server, mode):
    connect(world, "github", NOTES_KEY, name="Notes")

    async def scenario():
        async with _client(live_server, world.token, mode) as client:
            names = {tool.name for tool in (await client.list_tools()).tools}
            called = await client.call_tool("notes__search_notes", {"query": "release"})
            with pytest.raises(MCPError) as unknown:
                await client.call_tool("notes__nope", {})
            return names, called, unknown.value

    names, called, unknown = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert "notes__search_notes" in names
    assert called.is_error is False and "Release checklist" in called.content[0].text
    assert unknown.error.code == -32602 and unknown.error.message == "Unknown tool: notes__nope"


def test_the_python_sdk_gets_a_clean_auth_error_for_a_bad_token(db, world, live_server):
    async def scenario():
        async with _client(live_server, "not-a-token", "legacy") as client:
            await client.list_tools()

    # The SDK stops at once, and shows the reason (not "Server returned an error response").
    with pytest.raises(BaseException) as failure:
        asyncio.run(asyncio.wait_for(scenario(), timeout=60))

    def leaves(error: BaseException) -> list[BaseException]:
        if isinstance(error, BaseExceptionGroup):
            return [leaf for inner in error.exceptions for leaf in leaves(inner)]
        return [error]

    messages = [f"{type(e).__name__}: {e}" for e in leaves(failure.value)]
    assert any("Runtime tools token is missing, invalid, or expired" in m for m in messages), messages


# --- pass-through ----------------------------------------------------------------------------------------------


@pytest.fixture
def rich(app, mcp_server_factory):
    server = mcp_server_factory(start_rich_server)
    saved = app.config["PROVIDER_SERVER_URLS"]
    app.config["PROVIDER_SERVER_URLS"] = {**saved, "github": server.url}
    yield server
    app.config["PROVIDER_SERVER_URLS"] = saved


def test_listing_and_results_pass_the_provider_through(db, world, live_server, rich):
    connect(world, "github", NOTES_KEY, name="Weather")
    listed = {t["name"]: t for t in rpc(world.client, world.token, "tools/list").json["result"]["tools"]}
    forecast = listed["weather__forecast"]
    assert forecast["title"] == FORECAST_TITLE
    assert forecast["annotations"] == FORECAST_ANNOTATIONS
    assert forecast["_meta"] == FORECAST_META
    assert forecast["outputSchema"] == {
        "type": "object",
        "additionalProperties": True,
        "title": "forecastDictOutput",
    }
    called = rpc(
        world.client, world.token, "tools/call", {"name": "weather__forecast", "arguments": {"city": "Oslo"}}
    )
    result = called.json["result"]
    assert result["isError"] is False
    assert result["structuredContent"] == {"city": "Oslo", "temperatureC": 21}

    async def through_the_sdk():
        async with agent_session(live_server, world.token) as session:
            return (await session.list_tools()).tools

    tools = {t.name: t for t in asyncio.run(asyncio.wait_for(through_the_sdk(), timeout=60))}
    assert tools["weather__forecast"].title == FORECAST_TITLE
    assert tools["weather__forecast"].annotations.idempotent_hint is True


@pytest.mark.parametrize("mode", ["legacy", "auto"])
def test_progress_is_relayed_on_an_sse_response(db, world, live_server, rich, mode):
    connect(world, "github", NOTES_KEY, name="Weather")
    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress, total, message):
        seen.append((progress, total, message))

    async def scenario():
        async with _client(live_server, world.token, mode) as client:
            return await client.call_tool("weather__count_slowly", {}, progress_callback=on_progress)

    result = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert result.is_error is False and result.content[0].text == "counted"
    assert seen == [(step, PROGRESS_STEPS, f"step {step}") for step in range(1, PROGRESS_STEPS + 1)]


def test_without_a_progress_token_the_answer_is_plain_json(db, world, rich):
    connect(world, "github", NOTES_KEY, name="Weather")
    answer = world.client.post(
        URL,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "weather__count_slowly"}},
        headers={**bearer(world.token), "Accept": "application/json, text/event-stream"},
    )
    assert answer.mimetype == "application/json" and answer.json["result"]["content"][0]["text"] == "counted"


@pytest.fixture
def frozen(app, mcp_server_factory):
    server = mcp_server_factory(start_frozen_server)
    saved = app.config["PROVIDER_SERVER_URLS"]
    app.config["PROVIDER_SERVER_URLS"] = {**saved, "github": server.url}
    yield server
    server.release.set()
    app.config["PROVIDER_SERVER_URLS"] = saved


def _wait_until(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.01)


def test_notifications_cancelled_cancels_the_provider_call(db, world, live_server, frozen):
    connect(world, "github", NOTES_KEY, name="Slow")
    answers: list[dict] = []
    call = {
        "jsonrpc": "2.0",
        "id": "call-1",
        "method": "tools/call",
        "params": {"name": "slow__wait_for_release", "arguments": {"label": "a"}},
    }

    def agent_call():
        with httpx.Client(timeout=60) as http:
            answers.append(http.post(live_server, json=call, headers=bearer(world.token)).json())

    caller = threading.Thread(target=agent_call)
    caller.start()
    _wait_until(lambda: len(frozen.calls) == 1, "the call frozen at the provider")
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "call-1"}}
    with httpx.Client(timeout=60) as http:
        assert http.post(live_server, json=cancel, headers=bearer(world.token)).status_code == 202
    caller.join(PATIENCE)
    (answer,) = answers
    assert answer["result"]["isError"] is True
    assert refusal_fields(answer["result"])["reasonCode"] == "cancelled"
    assert json.dumps(answer).count("released") == 0  # the provider never answered it
