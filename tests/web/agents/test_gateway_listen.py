"""Issue 34 item 4: `subscriptions/listen` on the gateway (2026-07-28): acknowledged first, then
`notifications/tools/list_changed` when an access change changes the run's tool list, and a graceful close when the
run ends or its token expires.

The official Python SDK 2.x client's `listen` and raw streaming HTTP (httpx) against the live server; access is
changed as the board would change it (a grant revoked and restored, a tool policy), in the test's own transactions.
"Nothing changed, nothing sent" is told apart from "not looked yet" by the stream's own statements: a look that
started after a change was committed has seen it, and the next look starts only once that one has answered.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from datetime import timedelta
from unittest.mock import ANY

import httpx
import mcp_types
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.client.subscriptions import ListenNotSupportedError, ToolsListChanged
from mcp.shared._httpx_utils import create_mcp_http_client
from sqlalchemy import event, select

from app.extensions import db as _db
from app.models import ConnectionGrant
from app.models.base import utcnow
from app.services.access.revision import touch
from app.services.runs.tokens import TTL_SECONDS, mint_run_token
from app.web.agents import listen
from tests.conftest import count_statements
from tests.doors import bearer
from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_cancellation import gunicorn_server
from tests.services.gateway.test_gateway import connect, patch
from tests.web.agents.test_gateway_protocol import MODERN, RUNTIME_URL, modern_body, modern_headers

world = test_gateway.world
live_server = test_gateway.live_server

PATIENCE = 30.0  # an upper bound for waiting on another thread; never asserted
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
SERVER_INFO_KEY = "io.modelcontextprotocol/serverInfo"
SERVER_INFO = {"name": "switchboard-tool-gateway", "version": "1"}
SSE_ACCEPT = {"Accept": "application/json, text/event-stream"}


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.02)


def _grant(db, connection_id: str) -> ConnectionGrant:
    return db.session.scalar(
        select(ConnectionGrant).where(ConnectionGrant.connection_id == uuid.UUID(connection_id))
    )


def _listen_body(filter_: dict, id_="sub-1") -> dict:
    return modern_body("subscriptions/listen", {"notifications": filter_}, id_=id_)


def _listen_headers(token: str) -> dict:
    return {**modern_headers(token, "subscriptions/listen"), **SSE_ACCEPT}


class Looks:
    """Counts the stream's looks (the run-and-revision statement) as the live server runs them."""

    def __init__(self) -> None:
        self.count = 0
        self._lock = threading.Lock()

    def __call__(self, conn, cursor, statement, *args) -> None:
        if "FROM heartbeat_runs LEFT OUTER JOIN access_revisions" in statement:
            with self._lock:
                self.count += 1

    def wait_past(self, committed_at: int) -> None:
        """Until a look that started after `committed_at` looks has answered (the one after it has started)."""
        _wait_for(lambda: self.count >= committed_at + 2, "the stream to look twice")


@pytest.fixture
def looks(db) -> Iterator[Looks]:
    counter = Looks()
    event.listen(_db.engine, "before_cursor_execute", counter)
    yield counter
    event.remove(_db.engine, "before_cursor_execute", counter)


def _frames(lines: Iterator[str]) -> Iterator[tuple[str, dict | None]]:
    """SSE frames as ("comment", None) or ("data", message), in order."""
    for line in lines:
        if line.startswith(":"):
            yield "comment", None
        elif line.startswith("data: "):
            yield "data", json.loads(line.removeprefix("data: "))


def _to_the_end(frames: Iterator[tuple[str, dict | None]]) -> list[tuple[str, dict | None]]:
    """The frames left until the stream ends; a stream that goes on (keep-alives keep it from timing out) fails."""
    deadline = time.monotonic() + PATIENCE
    rest = []
    for frame in frames:
        rest.append(frame)
        if time.monotonic() > deadline:
            raise AssertionError(f"the stream did not end: {rest[-5:]}")
    return rest


# --- the Python SDK 2.x client ---------------------------------------------------------------------------------


def test_the_python_sdk_hears_access_changes_until_the_run_ends(db, world, live_server):
    notes = connect(world, "github", NOTES_KEY, name="Notes")
    grant = _grant(db, notes["id"])

    def change(status: str) -> None:
        grant.status = status
        db.session.commit()

    async def scenario():
        http = create_mcp_http_client(headers=bearer(world.token))
        async with Client(streamable_http_client(live_server, http_client=http), mode="auto") as client:  # type: ignore[arg-type]
            assert client.session.protocol_version == MODERN
            names = [[t.name for t in (await client.list_tools()).tools]]
            async with client.listen(tools_list_changed=True, prompts_list_changed=True) as subscription:
                honored = subscription.honored
                change("revoked")
                revoked = await asyncio.wait_for(anext(subscription), PATIENCE)
                names.append([t.name for t in (await client.list_tools()).tools])
                change("active")
                restored = await asyncio.wait_for(anext(subscription), PATIENCE)
                names.append([t.name for t in (await client.list_tools()).tools])
                world.run.status = "succeeded"
                db.session.commit()
                # The run ended: the subscription closes gracefully (a drop would raise SubscriptionLost).
                after_the_run = [e async for e in subscription]
            return honored, revoked, restored, names, after_the_run

    honored, revoked, restored, names, after_the_run = asyncio.run(asyncio.wait_for(scenario(), PATIENCE * 3))
    assert honored == mcp_types.SubscriptionFilter(tools_list_changed=True)  # no prompts here: not honoured
    assert revoked == ToolsListChanged() and restored == ToolsListChanged()
    assert "notes__search_notes" in names[0]
    assert names[1] == []
    assert names[2] == names[0]
    assert after_the_run == []
    _wait_for(lambda: listen.places.open_streams(world.run.id) == 0, "the stream's place to be freed")


def test_a_legacy_client_is_told_listen_is_not_there(db, world, live_server):
    async def scenario():
        http = create_mcp_http_client(headers=bearer(world.token))
        async with Client(streamable_http_client(live_server, http_client=http), mode="legacy") as client:  # type: ignore[arg-type]
            try:
                async with client.listen(tools_list_changed=True):
                    return None
            except ListenNotSupportedError as refused:
                return refused

    refused = asyncio.run(asyncio.wait_for(scenario(), PATIENCE))
    assert isinstance(refused, ListenNotSupportedError) and refused.negotiated_version == "2025-11-25"
    # On the wire, an earlier revision has no such method (HTTP 200 on the gateway, as every request error there),
    # and the runtime door, which speaks 2025-03-26 only, keeps its contracted 404.
    body = {"jsonrpc": "2.0", "id": 3, "method": "subscriptions/listen", "params": {"notifications": {}}}
    unknown = {
        "jsonrpc": "2.0",
        "id": 3,
        "error": {"code": -32601, "message": "Unknown method: subscriptions/listen"},
    }
    for version in ("2025-03-26", "2025-06-18", "2025-11-25"):
        answer = world.client.post(
            test_gateway.URL,
            json=body,
            headers={**bearer(world.token), **SSE_ACCEPT, "MCP-Protocol-Version": version},
        )
        assert (answer.status_code, answer.json) == (200, unknown)
    runtime = world.client.post(RUNTIME_URL, json=body, headers={**bearer(world.token), **SSE_ACCEPT})
    assert (runtime.status_code, runtime.json) == (404, unknown)


def test_a_listen_served_by_gunicorn_hears_another_process_and_closes_when_it_stops(
    app, db, world, notes_server, tmp_path
):
    """The production server (gunicorn, threaded workers) in a process of its own: the access change is made here,
    so only the database carries it. Told to stop, the server closes the stream gracefully at once (not after its
    35 s `graceful_timeout`, longer than the fixture waits before it kills the server)."""
    notes = connect(world, "github", NOTES_KEY, name="Notes")
    grant = _grant(db, notes["id"])
    body = _listen_body({"toolsListChanged": True})
    with ExitStack() as server, httpx.Client(timeout=PATIENCE) as http:
        url = server.enter_context(gunicorn_server(app, tmp_path, notes_server.url))
        with http.stream("POST", url, json=body, headers=_listen_headers(world.token)) as response:
            frames = _frames(response.iter_lines())
            assert next(frames)[1]["method"] == "notifications/subscriptions/acknowledged"
            grant.status = "revoked"
            db.session.commit()
            changed = next(message for kind, message in frames if kind == "data")
            assert changed["method"] == "notifications/tools/list_changed"
            server.close()  # SIGTERM, then wait for the server to exit
            assert [message for kind, message in _to_the_end(frames) if kind == "data"] == [
                {
                    "jsonrpc": "2.0",
                    "id": "sub-1",
                    "result": {
                        "resultType": "complete",
                        "_meta": {SUBSCRIPTION_ID: "sub-1", SERVER_INFO_KEY: SERVER_INFO},
                    },
                }
            ]


# --- raw HTTP ----------------------------------------------------------------------------------------------------


def test_the_stream_on_the_wire_says_only_what_changed(db, world, live_server, looks):
    notes = connect(world, "github", NOTES_KEY, name="Notes")
    requested = {
        "toolsListChanged": True,
        "promptsListChanged": True,
        "resourcesListChanged": True,
        "resourceSubscriptions": ["switchboard://anything"],
        "taskIds": ["an-extension-key"],
    }
    with (
        httpx.Client(timeout=PATIENCE) as http,
        http.stream(
            "POST", live_server, json=_listen_body(requested), headers=_listen_headers(world.token)
        ) as response,
    ):
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["X-Accel-Buffering"] == "no"
        assert "Mcp-Session-Id" not in response.headers
        frames = _frames(response.iter_lines())
        assert next(frames) == (
            "data",
            {
                "jsonrpc": "2.0",
                "method": "notifications/subscriptions/acknowledged",
                "params": {"_meta": {SUBSCRIPTION_ID: "sub-1"}, "notifications": {"toolsListChanged": True}},
            },
        )
        # The company's access revision moves, this run's listing does not: nothing to say.
        touch(world.company.id)
        db.session.commit()
        looks.wait_past(looks.count)
        # The run's listing changes (a policy blocks a tool): one notification, whatever else the company did.
        patch(world, notes["id"], {"toolPolicies": {"search_notes": "block"}})
        looks.wait_past(looks.count)
        world.run.status = "succeeded"
        db.session.commit()
        # Everything the stream said after its acknowledgement, to its end: keep-alive comments (one at least after
        # each look that found nothing to say, as the one after the company's change), one notification, the close.
        rest = _to_the_end(frames)
        assert ("comment", None) in rest[: rest.index(("data", ANY))]
        assert [message for kind, message in rest if kind == "data"] == [
            {
                "jsonrpc": "2.0",
                "method": "notifications/tools/list_changed",
                "params": {"_meta": {SUBSCRIPTION_ID: "sub-1"}},
            },
            {
                "jsonrpc": "2.0",
                "id": "sub-1",
                "result": {
                    "resultType": "complete",
                    "_meta": {SUBSCRIPTION_ID: "sub-1", SERVER_INFO_KEY: SERVER_INFO},
                },
            },
        ]
    _wait_for(lambda: listen.places.open_streams(world.run.id) == 0, "the stream's place to be freed")


def test_quiet_streams_are_kept_alive_and_end_when_the_token_expires(app, db, world, live_server):
    # A token minted so that it expires a moment from now.
    minted = mint_run_token(world.run, now=utcnow() - timedelta(seconds=TTL_SECONDS - 3))
    with (
        httpx.Client(timeout=PATIENCE) as http,
        http.stream(
            "POST",
            live_server,
            json=_listen_body({"toolsListChanged": True}, id_=5),
            headers=_listen_headers(minted.token),
        ) as response,
    ):
        frames = _to_the_end(_frames(response.iter_lines()))
    messages = [message for kind, message in frames if kind == "data"]
    assert [m.get("method") or m.get("result", {}).get("resultType") for m in messages] == [
        "notifications/subscriptions/acknowledged",
        "complete",
    ]
    assert messages[1]["id"] == 5 and messages[1]["result"]["_meta"][SUBSCRIPTION_ID] == 5


def test_a_listen_that_honours_nothing_is_acknowledged_and_closed(db, world):
    response = world.client.post(
        test_gateway.URL,
        json=_listen_body({"promptsListChanged": True}, id_=9),
        headers=_listen_headers(world.token),
    )
    assert response.status_code == 200 and response.mimetype == "text/event-stream"
    messages = [
        message
        for kind, message in _frames(iter(response.get_data(as_text=True).splitlines()))
        if kind == "data"
    ]
    assert messages == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {SUBSCRIPTION_ID: 9}, "notifications": {}},
        },
        {
            "jsonrpc": "2.0",
            "id": 9,
            "result": {"resultType": "complete", "_meta": {SUBSCRIPTION_ID: 9, SERVER_INFO_KEY: SERVER_INFO}},
        },
    ]
    assert listen.places.open_streams() == 0


def test_listen_refusals(db, world):
    def post(body, headers):
        return world.client.post(test_gateway.URL, json=body, headers=headers)

    no_sse = post(
        _listen_body({"toolsListChanged": True}), modern_headers(world.token, "subscriptions/listen")
    )
    assert no_sse.status_code == 406
    assert no_sse.json["error"] == {
        "code": -32600,
        "message": "Not Acceptable: subscriptions/listen is answered with an SSE stream; "
        "Accept must include text/event-stream",
    }
    invalid = {
        "code": -32602,
        "message": "Invalid params: notifications must be a subscription filter object",
    }
    for bad in (None, [], "tools", {"toolsListChanged": {"a": 1}}):
        refused = post(_listen_body(bad), _listen_headers(world.token))
        assert (refused.status_code, refused.json["error"]) == (200, invalid), bad
    missing = post(modern_body("subscriptions/listen"), _listen_headers(world.token))
    assert (missing.status_code, missing.json["error"]) == (200, invalid)
    # The run and its token are checked first, as for every request.
    world.run.status = "succeeded"
    db.session.commit()
    ended = post(_listen_body({"toolsListChanged": True}), _listen_headers(world.token))
    assert (
        ended.status_code == 403
        and ended.json["error"]["message"] == "Runtime tool token is no longer active"
    )
    assert listen.places.open_streams() == 0


def test_open_streams_are_bounded_and_a_disconnect_frees_a_place(db, world, live_server):
    body = _listen_body({"toolsListChanged": True})
    headers = _listen_headers(world.token)
    with httpx.Client(timeout=PATIENCE) as http:
        opened = []  # (the stream, its frames): a dropped frames generator would close its connection
        for _ in range(listen.LISTENS_PER_RUN):
            stream = http.stream("POST", live_server, json=body, headers=headers)
            frames = _frames(stream.__enter__().iter_lines())
            assert next(frames)[1]["method"] == "notifications/subscriptions/acknowledged"
            opened.append((stream, frames))
        assert listen.places.open_streams(world.run.id) == listen.LISTENS_PER_RUN
        refused = http.post(live_server, json=body, headers=headers)
        assert refused.status_code == 200 and refused.json()["error"] == {
            "code": -32603,
            "message": "Subscription limit reached: too many subscriptions/listen streams are open for this run or "
            "on this server; close one, or listen again later",
        }
        # The client goes away: the server notices at its next write.
        opened.pop()[0].__exit__(None, None, None)
        _wait_for(
            lambda: listen.places.open_streams(world.run.id) == listen.LISTENS_PER_RUN - 1,
            "the closed stream's place to be freed",
        )
        with http.stream("POST", live_server, json=body, headers=headers) as again:
            assert (
                next(_frames(again.iter_lines()))[1]["method"] == "notifications/subscriptions/acknowledged"
            )
        for stream, _ in opened:
            stream.__exit__(None, None, None)
    _wait_for(lambda: listen.places.open_streams() == 0, "every place to be freed")


def test_a_process_keeps_at_most_its_share_of_streams(app, db, make, world, live_server, monkeypatch):
    monkeypatch.setitem(app.config, "GATEWAY_LISTEN_MAX_STREAMS", 1)
    other = make.task_run("Beta")
    body = _listen_body({"toolsListChanged": True})
    with (
        httpx.Client(timeout=PATIENCE) as http,
        http.stream("POST", live_server, json=body, headers=_listen_headers(world.token)) as response,
    ):
        frames = _frames(response.iter_lines())
        assert next(frames)[1]["method"] == "notifications/subscriptions/acknowledged"
        refused = http.post(live_server, json=body, headers=_listen_headers(other.token))
        assert refused.json()["error"]["code"] == -32603
        assert listen.places.open_streams() == 1 and listen.places.open_streams(other.run.id) == 0
    _wait_for(lambda: listen.places.open_streams() == 0, "the place to be freed")


def test_a_quiet_look_is_one_statement(db, world, live_server, looks):
    with (
        httpx.Client(timeout=PATIENCE) as http,
        http.stream(
            "POST",
            live_server,
            json=_listen_body({"toolsListChanged": True}),
            headers=_listen_headers(world.token),
        ) as response,
    ):
        frames = _frames(response.iter_lines())
        assert next(frames)[1]["method"] == "notifications/subscriptions/acknowledged"
        with count_statements(_db.engine) as statements:
            start = looks.count
            _wait_for(lambda: looks.count >= start + 3, "three looks")
        # Only the looks ran (the run and its company's access revision), each one statement.
        assert len(statements) >= 3
        assert all(
            "FROM heartbeat_runs LEFT OUTER JOIN access_revisions" in statement for statement in statements
        )


def test_server_discover_says_the_tool_list_has_change_notifications(db, world):
    discover = world.client.post(
        test_gateway.URL,
        json=modern_body("server/discover"),
        headers=modern_headers(world.token, "server/discover"),
    )
    assert discover.json["result"]["capabilities"] == {"tools": {"listChanged": True}, "resources": {}}
    # The handshake revisions have no stream to send it on (no GET stream on this stateless door).
    init = world.client.post(
        test_gateway.URL,
        json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-11-25"}},
        headers=bearer(world.token),
    )
    assert init.json["result"]["capabilities"] == {"tools": {"listChanged": False}, "resources": {}}
