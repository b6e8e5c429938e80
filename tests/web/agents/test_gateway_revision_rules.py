"""Issue 34, items 2, 5 and 6 on the doors: each revision's disconnect rule, the 2025-11-25 priming event, an invalid
cursor, and JSON answers where OAuth clients look for an authorization server.

Streams are read over a real socket (httpx against the served app) from a provider that holds its answer until
released (`start_frozen_server`), so "the provider call was cancelled" and "it ran to its end" are told apart by what
the gateway recorded: the call's activity row and its outcome.
"""

from __future__ import annotations

import time

import httpx
import pytest
from sqlalchemy import select

from app.models import ActivityLog
from tests.doors import bearer
from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import URL, connect
from tests.web.agents import test_gateway_protocol
from tests.web.agents.test_gateway_protocol import MODERN, RUNTIME_URL, modern_body, modern_headers

world = test_gateway.world
live_server = test_gateway.live_server
frozen = test_gateway_protocol.frozen
PATIENCE = 30.0  # an upper bound for waiting on another thread; never asserted


def _call_outcomes(db) -> list[str]:
    db.session.expire_all()
    rows = db.session.scalars(select(ActivityLog).where(ActivityLog.action == "tool_gateway.call"))
    return [str((row.details or {}).get("outcome")) for row in rows]


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.02)


def _open_stream_and_close(url: str, body: dict, headers: dict, frozen) -> list[str]:
    """POST a streamed call, read until the provider holds it, then drop the connection; returns the lines read."""
    lines: list[str] = []
    with (
        httpx.Client(timeout=PATIENCE) as http,
        http.stream("POST", url, json=body, headers=headers) as response,
    ):
        assert response.status_code == 200 and response.headers["content-type"].startswith(
            "text/event-stream"
        )
        stream = response.iter_lines()
        _wait_for(lambda: len(frozen.calls) == 1, "the call to reach the provider")
        lines.append(next(stream))
        lines.append(next(stream))
    return lines  # leaving both blocks closes the connection


def test_a_2025_11_25_stream_is_primed_and_a_disconnect_does_not_cancel(db, world, live_server, frozen):
    connect(world, "github", NOTES_KEY, name="Slow")
    body = {
        "jsonrpc": "2.0",
        "id": "call-1",
        "method": "tools/call",
        "params": {
            "name": "slow__wait_for_release",
            "arguments": {"label": "a"},
            "_meta": {"progressToken": "p"},
        },
    }
    headers = {
        **bearer(world.token),
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-11-25",
    }
    lines = _open_stream_and_close(live_server, body, headers, frozen)
    assert lines[0].startswith("id: ") and len(lines[0]) > 4 and lines[1] == "data: "
    # The client went away; on this revision that is not a cancellation: the call runs to its end.
    time.sleep(0.5)
    assert _call_outcomes(db) == []
    frozen.release.set()
    _wait_for(lambda: _call_outcomes(db) != [], "the call to finish and be recorded")
    assert _call_outcomes(db) == ["ok"]


@pytest.mark.parametrize("with_progress", [True, False], ids=["progress-token", "no-progress-token"])
def test_a_2026_07_28_disconnect_cancels_the_call(db, world, live_server, frozen, with_progress):
    """A 2026-07-28 client that accepts SSE gets a stream even without a progress token, so its disconnect is seen."""
    connect(world, "github", NOTES_KEY, name="Slow")
    name = "slow__wait_for_release"
    body = modern_body("tools/call", {"name": name, "arguments": {"label": "b"}}, id_="call-2")
    if with_progress:
        body["params"]["_meta"]["progressToken"] = "p"
    headers = {
        **modern_headers(world.token, "tools/call", name),
        "Accept": "application/json, text/event-stream",
    }
    lines = _open_stream_and_close(live_server, body, headers, frozen)
    assert lines == [": call started", ""]  # no priming event on 2026-07-28: a comment sends the headers
    _wait_for(lambda: _call_outcomes(db) != [], "the cancelled call to be recorded")
    assert _call_outcomes(db) == ["cancelled"]
    frozen.release.set()


@pytest.mark.parametrize(("path", "status"), [(URL, 200), (RUNTIME_URL, 400)])
def test_an_invalid_cursor_is_invalid_params(db, world, path, status):
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/list", "params": {"cursor": "not-one-of-ours"}}
    response = world.client.post(path, json=body, headers=bearer(world.token))
    assert response.status_code == status
    assert response.json == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32602, "message": "Invalid cursor"},
    }
    listed = world.client.post(path, json={**body, "params": {}}, headers=bearer(world.token))
    assert listed.status_code == 200 and "tools" in listed.json["result"]


def test_a_modern_invalid_cursor_too(db, world):
    body = modern_body("tools/list", {"cursor": "x"})
    response = world.client.post(URL, json=body, headers=modern_headers(world.token, "tools/list"))
    assert response.json["error"] == {"code": -32602, "message": "Invalid cursor"}
    assert MODERN in response.headers.get("MCP-Protocol-Version", MODERN)


NO_CLIENT = (
    "The client cannot authenticate with methods: ['none', 'client_secret_basic', 'client_secret_post']"
)
OAUTH_REFUSALS = {
    "/register": (415, {"error": "Unsupported Media Type"}),
    "/token": (400, {"error": "unsupported_grant_type"}),
    "/revoke": (401, {"error": "invalid_client", "error_description": NO_CLIENT}),
    "/device_authorization": (401, {"error": "invalid_client", "error_description": NO_CLIENT}),
}


@pytest.mark.parametrize("path", sorted(OAUTH_REFUSALS))
def test_oauth_endpoints_answer_json_not_a_page(client, path):
    """The assistants' authorization server (issue 29): a malformed request gets OAuth's JSON error, never a page."""
    status, body = OAUTH_REFUSALS[path]
    refused = client.post(path, data={"client_name": "x"})
    assert (refused.status_code, refused.json) == (status, body)
    wrong_method = client.get(path)
    assert (wrong_method.status_code, wrong_method.json) == (405, {"error": "Method not allowed"})
