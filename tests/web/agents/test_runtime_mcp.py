"""The `/mcp/runtime-tools` endpoint: the official MCP Python SDK client over a real socket, plus the exact JSON-RPC
and HTTP answers for the cases the SDK never sends."""

from __future__ import annotations

import asyncio
import json

import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from sqlalchemy import select

from app.models import ThreadInteraction
from app.services.runs.runtime_tools import GUIDANCE, TOOL_DEFINITIONS
from tests.conftest import serving, sign_in
from tests.doors import TOKEN_INVALID, bearer

URL = "/mcp/runtime-tools"


@pytest.fixture
def live_server(app, db):
    with serving(app) as base:
        yield f"{base}{URL}"


def rpc(client, token, method, params=None, id_=1, **headers):
    message = {"jsonrpc": "2.0", "method": method}
    if id_ is not None:
        message["id"] = id_
    if params is not None:
        message["params"] = params
    return client.post(URL, json=message, headers={**bearer(token), **headers})


def _structured(result) -> dict:
    return result.structured_content


def test_sdk_session_initializes_lists_and_calls_both_tools(db, world, live_server):
    async def scenario():
        http = create_mcp_http_client(headers=bearer(world.token))
        async with (
            http,
            streamable_http_client(live_server, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            assert init.server_info.name == "paperclip-runtime-tools" and init.server_info.version == "1"
            assert init.protocol_version == "2025-03-26"
            tools = await session.list_tools()
            assert [t.name for t in tools.tools] == ["connections_search", "connection_request"]
            found = await session.call_tool("connections_search", {"query": "github"})
            assert not found.is_error
            assert _structured(found)["results"][0]["service"] == "github"
            assert json.loads(found.content[0].text) == _structured(found)
            requested = await session.call_tool("connection_request", {"service": "github"})
            assert not requested.is_error and _structured(requested)["state"] == "needs_user_action"
            unknown = await session.call_tool("connection_request", {"service": "nope"})
            assert unknown.is_error
            assert unknown.content[0].text == "Connection service nope is not available"
            return _structured(requested)["interactionId"]

    interaction_id = asyncio.run(scenario())
    db.session.expire_all()
    (card,) = db.session.scalars(select(ThreadInteraction)).all()
    assert str(card.id) == interaction_id and card.addressee_user_id == world.owner.id


def test_sdk_high_level_client_in_auto_mode_falls_back_from_discover(db, world, live_server, caplog):
    caplog.set_level("INFO", logger="werkzeug")

    async def scenario():
        http = create_mcp_http_client(headers=bearer(world.token))
        async with http, Client(streamable_http_client(live_server, http_client=http), mode="auto") as client:
            tools = await client.list_tools()
            assert {t.name for t in tools.tools} == {"connections_search", "connection_request"}
            found = await client.call_tool("connections_search", {"query": ""})
            assert len(found.structured_content["results"]) > 1
            requested = await client.call_tool("connection_request", {"service": "notion"})
            assert requested.structured_content["state"] == "needs_user_action"

    asyncio.run(scenario())
    # The first POST was the `server/discover` probe, answered 404 (-32601); the client fell back to initialize.
    statuses = [r.getMessage() for r in caplog.records if "POST /mcp/runtime-tools" in r.getMessage()]
    assert '" 404 ' in statuses[0] and all('" 404 ' not in s for s in statuses[1:])


def test_sdk_client_without_a_token_is_refused(world, live_server):
    async def scenario():
        http = create_mcp_http_client()
        async with (
            http,
            streamable_http_client(live_server, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            await session.initialize()

    with pytest.raises(Exception):  # noqa: B017 (the SDK's error type for an HTTP 401 is an implementation detail)
        asyncio.run(asyncio.wait_for(scenario(), timeout=20))


def test_get_discovery_and_sse_probe(client, db, world):
    discovery = client.get(URL, headers=bearer(world.token))
    assert discovery.status_code == 200
    assert discovery.json == {"name": "paperclip-runtime-tools", "protocolVersion": "2025-03-26"}
    probe = client.get(URL, headers={**bearer(world.token), "Accept": "text/event-stream"})
    assert probe.status_code == 405 and probe.headers["Allow"] == "POST" and probe.get_data() == b""
    unauthenticated = client.get(URL, headers={"Accept": "text/event-stream"})
    assert unauthenticated.status_code == 401 and unauthenticated.json == TOKEN_INVALID
    world.run.status = "failed"
    db.session.commit()
    ended = client.get(URL, headers=bearer(world.token))
    assert ended.status_code == 403 and ended.json == {"error": "Runtime tool token is no longer active"}


def test_initialize_ping_notifications_and_list(client, world):
    init = rpc(
        client, world.token, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}}, id_=7
    )
    assert init.status_code == 200 and init.mimetype == "application/json"
    assert "Mcp-Session-Id" not in init.headers
    assert init.json == {
        "jsonrpc": "2.0",
        "id": 7,
        "result": {
            "protocolVersion": "2025-03-26",
            "capabilities": {"tools": {"listChanged": False}},
            "serverInfo": {"name": "paperclip-runtime-tools", "version": "1"},
        },
    }
    for method in ("notifications/initialized", "notifications/cancelled"):
        note = rpc(client, world.token, method, id_=None)
        assert note.status_code == 202 and note.get_data() == b""
    assert rpc(client, world.token, "ping", id_="p").json == {"jsonrpc": "2.0", "id": "p", "result": {}}
    listed = rpc(client, world.token, "tools/list").json["result"]["tools"]
    assert listed == TOOL_DEFINITIONS
    for tool in listed:
        assert (
            tool["inputSchema"]["type"] == "object" and tool["inputSchema"]["additionalProperties"] is False
        )
        assert "http" not in tool["description"]
    assert "http" not in GUIDANCE.lower().replace("https", "")


def test_unknown_tool_and_method_are_404(client, world):
    unknown_tool = rpc(client, world.token, "tools/call", {"name": "delete_everything", "arguments": {}})
    assert unknown_tool.status_code == 404
    assert unknown_tool.json == {
        "jsonrpc": "2.0",
        "id": 1,
        "error": {"code": -32601, "message": "Unknown tool: delete_everything"},
    }
    missing = rpc(client, world.token, "tools/call", {})
    assert missing.status_code == 404 and missing.json["error"]["message"] == "Unknown tool: missing"
    discover = rpc(client, world.token, "server/discover", {})
    assert discover.status_code == 404
    assert discover.json["error"] == {"code": -32601, "message": "Unknown method: server/discover"}


def test_malformed_bodies(client, world):
    headers = {**bearer(world.token), "Content-Type": "application/json"}
    parse = client.post(URL, data="{not json", headers=headers)
    assert parse.status_code == 400 and parse.json["error"]["code"] == -32700 and parse.json["id"] is None
    batch = client.post(
        URL, data=json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "ping"}]), headers=headers
    )
    # DECISIONS: revision 2025-03-26 (which this door speaks) requires receiving batches: an array of responses,
    # notifications inside get no entry, an empty array is -32600.
    assert batch.status_code == 200 and batch.json == [{"jsonrpc": "2.0", "id": 1, "result": {}}]
    mixed = client.post(
        URL,
        data=json.dumps(
            [
                {"jsonrpc": "2.0", "method": "notifications/initialized"},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "nope"}},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
            ]
        ),
        headers=headers,
    )
    assert mixed.status_code == 200
    assert [m["id"] for m in mixed.json] == [2, 3]
    assert mixed.json[0]["error"] == {"code": -32601, "message": "Unknown tool: nope"}
    assert [t["name"] for t in mixed.json[1]["result"]["tools"]] == [
        "connections_search",
        "connection_request",
    ]
    only_notes = client.post(
        URL, data=json.dumps([{"jsonrpc": "2.0", "method": "notifications/initialized"}]), headers=headers
    )
    assert only_notes.status_code == 202 and only_notes.get_data() == b""
    empty = client.post(URL, data="[]", headers=headers)
    assert empty.status_code == 400 and empty.json["error"]["code"] == -32600
    scalar = client.post(URL, data="42", headers=headers)
    assert scalar.status_code == 400 and scalar.json["error"]["code"] == -32600


def test_token_is_checked_before_the_body(client, world):
    response = client.post(URL, data="{not json", headers={"Content-Type": "application/json"})
    assert response.status_code == 401 and response.json == TOKEN_INVALID


def test_a_request_that_sends_a_card_answers_the_contract_text(client, db, world):
    answer = rpc(
        client, world.token, "tools/call", {"name": "connection_request", "arguments": {"service": "notion"}}
    )
    assert answer.status_code == 200
    (card,) = db.session.scalars(select(ThreadInteraction)).all()
    value = {
        "version": 1,
        "service": "notion",
        "state": "needs_user_action",
        "connectionId": None,
        "interactionId": str(card.id),
        "instruction": "A connection card was sent to the responsible user. End this run and wait for continuation.",
    }
    assert answer.json == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"content": [{"type": "text", "text": json.dumps(value)}], "structuredContent": value},
    }


def test_after_a_decline_the_same_run_is_refused_over_mcp(app, client, db, world):
    def request():
        return rpc(
            client,
            world.token,
            "tools/call",
            {"name": "connection_request", "arguments": {"service": "notion"}},
        )

    card_id = request().json["result"]["structuredContent"]["interactionId"]
    board = app.test_client()
    token = sign_in(board, world.owner)
    declined = board.post(
        f"/api/connection-intents/{card_id}/decline", json={}, headers={"X-CSRFToken": token}
    )
    assert declined.status_code == 200
    refused = request()
    assert refused.status_code == 200
    assert refused.json["result"] == {
        "content": [
            {
                "type": "text",
                "text": "The user declined this connection. Pursue alternatives; do not request it again in this "
                "continuation.",
            }
        ],
        "isError": True,
    }
    assert [c.status for c in db.session.scalars(select(ThreadInteraction))] == ["rejected"]


def test_tool_failures_are_readable_but_run_failures_keep_http_status(client, db, world):
    bad_args = rpc(client, world.token, "tools/call", {"name": "connection_request", "arguments": {"svc": 1}})
    assert bad_args.status_code == 200 and bad_args.json["result"]["isError"] is True
    assert bad_args.json["result"]["content"][0]["text"].startswith("Validation error")

    world.issue.status = "cancelled"
    db.session.commit()
    closed = rpc(
        client, world.token, "tools/call", {"name": "connection_request", "arguments": {"service": "github"}}
    )
    assert closed.status_code == 200
    assert closed.json["result"] == {
        "content": [{"type": "text", "text": "Connection requests cannot be created on a closed task"}],
        "isError": True,
    }
    # The handshake still works for a live run that cannot make requests.
    assert rpc(client, world.token, "tools/list").status_code == 200

    world.run.status = "succeeded"
    db.session.commit()
    ended = rpc(client, world.token, "tools/call", {"name": "connections_search", "arguments": {}})
    assert ended.status_code == 403 and ended.json == {"error": "Runtime tool token is no longer active"}
    assert rpc(client, "garbage", "tools/list").status_code == 401


def test_cli_helpers_call_the_rest_routes_with_the_run_environment(app, db, world, live_server):
    base = live_server.removesuffix(URL)
    env = {
        "PAPERCLIP_RUNTIME_TOOLS_TOKEN": world.token,
        "PAPERCLIP_RUNTIME_TOOLS_CONNECTIONS_SEARCH_URL": f"{base}/runtime-tools/connections/search",
        "PAPERCLIP_RUNTIME_TOOLS_CONNECTION_REQUEST_URL": f"{base}/runtime-tools/connections/request",
    }
    runner = app.test_cli_runner()
    found = runner.invoke(args=["connections", "search", "git", "hub"], env=env)
    assert found.exit_code == 0, found.output
    assert json.loads(found.output)["query"] == "git hub"
    requested = runner.invoke(args=["connections", "request", "notion"], env=env)
    assert requested.exit_code == 0, requested.output
    assert json.loads(requested.output)["state"] == "needs_user_action"
    refused = runner.invoke(args=["connections", "request", "nope"], env=env)
    assert refused.exit_code == 1 and "is not available" in refused.output
    outside = runner.invoke(
        args=["connections", "search", "x"], env={**env, "PAPERCLIP_RUNTIME_TOOLS_TOKEN": ""}
    )
    assert outside.exit_code != 0 and "active heartbeat run" in outside.output
