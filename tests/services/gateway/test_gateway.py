"""The tool gateway `/mcp/gateway`: the official MCP SDK client as the agent, real MCP provider peers on
loopback.

Connections are made through the board API (the same setup flow people use), approvals are answered through
the board's htmx endpoints, and the provider peers record what they actually executed.
"""

from __future__ import annotations

import asyncio
import json
import threading
import uuid
from contextlib import asynccontextmanager

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from sqlalchemy import select

from app.adapters.process import runtime_tools_env
from app.models import ActivityLog, ConnectionGrant, ConnectionInstall, ThreadInteraction, ToolConnection
from app.services.access.effective import effective_access
from app.services.gateway import calls as gateway_calls
from app.services.gateway import tools as gateway_tools
from app.services.runs.runtime_tools import runtime_tools_descriptor
from tests.conftest import count_statements, serving, sign_in
from tests.doors import GATEWAY_URL, TOKEN_INVALID, approval_card, bearer, refusal_fields, rpc
from tests.peers.mcp_servers import HONCHO_KEY, NOTES_KEY

URL = GATEWAY_URL
SECRET_ARG = "sup3r-s3cret-argument-value"


# --- fixtures and helpers ----------------------------------------------------------------------------------------


@pytest.fixture
def live_server(app, db):
    with serving(app) as base:
        yield f"{base}{URL}"


def api(client, csrf, method, url, body=None):
    return client.open(url, method=method, json=body, headers={"X-CSRFToken": csrf})


@pytest.fixture
def world(make, client, providers):
    """Acme: an owner (responsible for the task), an agent running on it, a board client signed in as owner."""
    return make.task_run(client=client)


def connect(world, app_slug, key, *, name=None, workspace="team-workspace"):
    body = {"appSlug": app_slug, "identity": "organization", "credentials": {"authorization": key}}
    if app_slug == "honcho":
        body["methodConfig"] = {"workspaceId": workspace}
    if name:
        body["name"] = name
    response = api(
        world.client, world.csrf, "POST", f"/api/companies/{world.company.id}/tools/apps/connect", body
    )
    assert response.status_code == 201, response.json
    return response.json


def patch(world, connection_id, body):
    response = api(world.client, world.csrf, "PATCH", f"/api/tool-connections/{connection_id}", body)
    assert response.status_code == 200, response.json
    return response.json


@asynccontextmanager
async def agent_session(url, token):
    http = create_mcp_http_client(headers=bearer(token))
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def run_agent(url, token, scenario):
    async def main():
        async with agent_session(url, token) as session:
            return await scenario(session)

    return asyncio.run(asyncio.wait_for(main(), timeout=60))


def text_of(result) -> str:
    return result.content[0].text


def approve(world, approval_id, action="approve", client=None, csrf=None):
    return (client or world.client).post(
        f"/approvals/{approval_id}/{action}",
        headers={"X-CSRFToken": csrf or world.csrf, "HX-Request": "true"},
    )


def cards(db):
    db.session.expire_all()
    return db.session.scalars(select(ThreadInteraction).order_by(ThreadInteraction.created_at)).all()


def gateway_activity(db):
    db.session.expire_all()
    return db.session.scalars(
        select(ActivityLog)
        .where(ActivityLog.action == gateway_calls.ACTIVITY_ACTION)
        .order_by(ActivityLog.created_at)
    ).all()


# --- listing -----------------------------------------------------------------------------------------------------


def test_listing_matches_effective_access_and_hides_managed_and_blocked(db, world, live_server):
    honcho = connect(world, "honcho", HONCHO_KEY)
    notes = connect(world, "github", NOTES_KEY)
    patch(world, notes["id"], {"toolPolicies": {"get_note": "block"}})

    async def scenario(session):
        return (await session.list_tools()).tools

    tools = {t.name: t for t in run_agent(live_server, world.token, scenario)}
    expected = set()
    for access in effective_access(world.company.id, world.agent.id, world.owner.id):
        slug = gateway_tools.connection_slug(access.connection.name)
        expected |= {f"{slug}__{t.tool.name}" for t in access.usable_tools}
    assert set(tools) == expected
    assert {"honcho__search_memory", "honcho__save_memory", "github__search_notes"} <= set(tools)
    assert "github__get_note" not in tools  # blocked: not listed
    search = tools["honcho__search_memory"].input_schema
    assert "workspace_id" not in search["properties"] and "workspace_id" not in search.get("required", [])
    assert "query" in search["properties"] and search["required"] == ["query"]
    assert "workspace_id" not in json.dumps(tools["honcho__save_memory"].input_schema)
    assert "needs approval" in tools["honcho__save_memory"].description
    assert "needs approval" not in tools["honcho__search_memory"].description
    assert honcho["name"] in tools["honcho__search_memory"].description


def test_names_never_collide_across_connections(db, world):
    first = connect(world, "github", NOTES_KEY, name="Team Notes")
    second = connect(world, "github", NOTES_KEY, name="team-notes")
    names = [t["name"] for t in rpc(world.client, world.token, "tools/list").json["result"]["tools"]]
    assert len(names) == len(set(names))
    for created in (first, second):
        prefix = f"team-notes-{uuid.UUID(created['id']).hex[:8]}__"
        assert f"{prefix}search_notes" in names
        # A call resolves the suffixed name to its own connection (reading only that connection's tools).
        called = rpc(
            world.client,
            world.token,
            "tools/call",
            {"name": f"{prefix}search_notes", "arguments": {"query": "x"}},
        )
        assert called.json["result"].get("isError") is not True, called.json
        assert gateway_activity(db)[-1].details["connectionId"] == created["id"]
    unknown = rpc(
        world.client, world.token, "tools/call", {"name": "team-notes__search_notes", "arguments": {}}
    )
    # An unknown tool is a protocol error clients can read: -32602 at HTTP 200 (DECISIONS, 2025-06-18 "Error Handling").
    assert unknown.status_code == 200
    assert unknown.json["error"] == {"code": -32602, "message": "Unknown tool: team-notes__search_notes"}
    assert gateway_tools.connection_slug("  Ünïcode / Notes!! ") == "n-code-notes"
    assert gateway_tools.connection_slug("x" * 100) == "x" * gateway_tools.SLUG_MAX_LENGTH
    for budget in (24, 50, gateway_tools.NAME_MAX_LENGTH):  # a long name is cut to the caller's budget
        assert len(gateway_tools.visible_name("s", "t" * 300, budget)) == budget


def test_tools_list_statement_count_is_constant_as_connections_grow(app, db, world):
    from app.extensions import db as _db

    def listing_statements():
        with count_statements(_db.engine) as statements:
            response = rpc(world.client, world.token, "tools/list")
        assert response.status_code == 200
        return len(statements), len(response.json["result"]["tools"])

    connect(world, "github", NOTES_KEY, name="Notes 1")
    one, tools_one = listing_statements()
    for n in range(2, 6):
        connect(world, "github", NOTES_KEY, name=f"Notes {n}")
    connect(world, "honcho", HONCHO_KEY)
    many, tools_many = listing_statements()
    assert tools_many > tools_one
    assert many == one


def test_the_listing_is_built_from_plain_rows_as_the_tool_map_would_list_it(app, db, world):
    """`build_listing` (plain rows) and `tool_map` (the call path's objects) agree, managed and blocked included."""
    notes = connect(world, "github", NOTES_KEY, name="Notes")
    connect(world, "github", NOTES_KEY, name="Notes")  # the same name twice: suffixed slugs
    connect(world, "honcho", HONCHO_KEY)  # a managed workspace argument
    patch(world, notes["id"], {"toolPolicies": {"get_note": "block", "search_notes": "allow"}})
    run = db.session.get(type(world.run), world.run.id)
    listing = json.loads(gateway_tools.build_listing(run))
    assert listing == [tool.definition() for tool in gateway_tools.tool_map(run).values()]
    names = [tool["name"] for tool in listing]
    assert len(names) == len(set(names)) and any(name.startswith("honcho") for name in names)
    assert not any(name.endswith("__get_note") and notes["id"][:8] in name for name in names)


def test_call_statement_count_does_not_grow_with_the_agents_tools(app, db, world):
    from app.extensions import db as _db

    def call_statements():
        with count_statements(_db.engine) as statements:
            response = rpc(
                world.client,
                world.token,
                "tools/call",
                {"name": "notes-1__get_note", "arguments": {"note_id": "n1"}},
            )
        assert response.status_code == 200 and "result" in response.json, response.json
        return len(statements)

    connect(world, "github", NOTES_KEY, name="Notes 1")
    call_statements()  # also builds the provider target, kept while its inputs are unchanged (`gateway.targets`)
    connect(world, "honcho", HONCHO_KEY)
    one = call_statements()  # the tool resolved afresh after an access change
    for n in range(2, 6):
        connect(world, "github", NOTES_KEY, name=f"Notes {n}")
    assert call_statements() == one


# --- policy and approvals ----------------------------------------------------------------------------------------


def test_blocked_tool_called_by_name_never_reaches_the_provider(db, world, live_server, notes_server):
    notes = connect(world, "github", NOTES_KEY)
    patch(world, notes["id"], {"toolPolicies": {"search_notes": "block"}})

    async def scenario(session):
        return await session.call_tool("github__search_notes", {"query": "x"})

    result = run_agent(live_server, world.token, scenario)
    assert result.is_error and text_of(result).startswith("tool_blocked:")
    assert "blocked" in text_of(result) and notes["name"] in text_of(result)
    assert notes_server.calls == []
    (row,) = gateway_activity(db)
    assert row.details["decision"] == "tool_blocked" and row.details["connectionId"] == notes["id"]
    assert row.run_id == world.run.id and isinstance(row.details["durationMs"], int)


def test_ask_first_creates_one_card_and_approval_lets_exactly_one_retry(
    db, world, live_server, honcho_server
):
    connect(world, "honcho", HONCHO_KEY)
    state = {}

    async def scenario(session):
        first = await session.call_tool("honcho__save_memory", {"content": "likes tea"})
        second = await session.call_tool("honcho__save_memory", {"content": "likes tea"})
        assert first.is_error and second.is_error
        assert refusal_fields(first)["reasonCode"] == "approval_required"
        approval_id = refusal_fields(first)["approvalId"]
        assert refusal_fields(second)["approvalId"] == approval_id and approval_id in text_of(first)
        assert honcho_server.calls == []
        # The addressee approves on the board (htmx): the card fragment comes back.
        answered = approve(world, approval_id)
        assert answered.status_code == 200
        html = answered.get_data(as_text=True)
        assert "<html" not in html and "approved" in html and 'id="approval-' in html
        state["approval_id"] = approval_id
        ran = await session.call_tool("honcho__save_memory", {"content": "likes tea"})
        again = await session.call_tool("honcho__save_memory", {"content": "likes tea"})
        return ran, again

    ran, again = run_agent(live_server, world.token, scenario)
    assert not ran.is_error and ran.structured_content["received"] == {
        "workspace_id": "team-workspace",
        "content": "likes tea",
    }
    assert again.is_error and refusal_fields(again)["reasonCode"] == "approval_required"
    assert refusal_fields(again)["approvalId"] != state["approval_id"]
    assert honcho_server.calls == [
        ("save_memory", {"workspace_id": "team-workspace", "content": "likes tea"})
    ]
    statuses = [(str(c.id), c.status) for c in cards(db)]
    assert statuses == [
        (state["approval_id"], "consumed"),
        (refusal_fields(again)["approvalId"], "pending"),
    ]
    decisions = [r.details["decision"] for r in gateway_activity(db)]
    assert decisions == ["approval_required", "approval_required", "approved", "approval_required"]
    outcomes = [r.details["outcome"] for r in gateway_activity(db)]
    assert outcomes == ["refused", "refused", "ok", "refused"]


def test_card_is_rendered_in_the_thread_with_buttons_only_for_the_addressee(db, make, world, app):
    connect(world, "honcho", HONCHO_KEY)
    approval_id = approval_card(world, content="c")
    page = world.client.get(f"/tasks/{world.issue.id}").get_data(as_text=True)
    assert "Approve save_memory on Honcho?" in page and "team-workspace" in page
    assert f"/approvals/{approval_id}/approve" in page and f"/approvals/{approval_id}/deny" in page
    # Another member sees the card but no buttons, and cannot answer it.
    member = make.member(world.company, "member")
    other = app.test_client()
    other_csrf = sign_in(other, member)
    other_page = other.get(f"/tasks/{world.issue.id}").get_data(as_text=True)
    assert (
        "Approve save_memory on Honcho?" in other_page
        and f"/approvals/{approval_id}/approve" not in other_page
    )
    assert approve(world, approval_id, client=other, csrf=other_csrf).status_code == 403
    # Someone from another company cannot even see it.
    outsider_company = make.company("Elsewhere")
    outsider = make.member(outsider_company, "owner")
    stranger = app.test_client()
    stranger_csrf = sign_in(stranger, outsider)
    assert approve(world, approval_id, client=stranger, csrf=stranger_csrf).status_code == 404
    # Without the CSRF token the answer is refused.
    assert world.client.post(f"/approvals/{approval_id}/approve").status_code == 400
    # A plain form post (no htmx) is redirected back to the task.
    done = world.client.post(f"/approvals/{approval_id}/approve", data={"csrf_token": world.csrf})
    assert done.status_code == 303 and f"/tasks/{world.issue.id}" in done.headers["Location"]
    assert approve(world, approval_id).status_code == 409  # already answered
    # The answered card says who answered and when (issue 15).
    answered = world.client.get(f"/tasks/{world.issue.id}").get_data(as_text=True)
    assert f"Approved by {world.owner.name} at <time datetime=" in answered


def test_denial_refuses_the_call_and_the_provider_is_not_called(db, world, live_server, honcho_server):
    connect(world, "honcho", HONCHO_KEY)

    async def scenario(session):
        first = await session.call_tool("honcho__save_memory", {"content": "x"})
        approval_id = refusal_fields(first)["approvalId"]
        denied = approve(world, approval_id, "deny")
        assert denied.status_code == 200 and "Denied" in denied.get_data(as_text=True)
        return await session.call_tool("honcho__save_memory", {"content": "x"})

    result = run_agent(live_server, world.token, scenario)
    assert result.is_error and refusal_fields(result)["reasonCode"] == "approval_denied"
    assert honcho_server.calls == []
    assert [c.status for c in cards(db)] == ["denied"]


# --- managed arguments (Honcho workspace) --------------------------------------------------------------------------


def test_configured_workspace_overrides_a_forged_one(db, world, live_server, honcho_server):
    connect(world, "honcho", HONCHO_KEY)

    async def scenario(session):
        return await session.call_tool(
            "honcho__search_memory", {"workspace_id": "someone-else", "query": "tea"}
        )

    result = run_agent(live_server, world.token, scenario)
    assert not result.is_error
    assert result.structured_content["received"] == {"workspace_id": "team-workspace", "query": "tea"}
    assert honcho_server.calls == [("search_memory", {"workspace_id": "team-workspace", "query": "tea"})]
    (row,) = gateway_activity(db)
    assert row.details["decision"] == "allowed" and row.details["outcome"] == "ok"
    assert "someone-else" not in json.dumps(row.details) and "tea" not in json.dumps(row.details)


def test_changing_the_workspace_invalidates_an_approved_call(db, world, live_server, honcho_server):
    honcho = connect(world, "honcho", HONCHO_KEY)

    async def scenario(session):
        first = await session.call_tool("honcho__save_memory", {"content": "x"})
        assert approve(world, refusal_fields(first)["approvalId"]).status_code == 200
        patch(world, honcho["id"], {"methodConfig": {"workspaceId": "other-workspace"}})
        changed = await session.call_tool("honcho__save_memory", {"content": "x"})
        after = await session.call_tool("honcho__save_memory", {"content": "x"})
        return first, changed, after

    first, changed, after = run_agent(live_server, world.token, scenario)
    assert changed.is_error and refusal_fields(changed)["reasonCode"] == "approved_tool_target_changed"
    assert refusal_fields(changed)["approvalId"] == refusal_fields(first)["approvalId"]
    assert honcho_server.calls == []
    # The next call asks again, showing the new workspace.
    assert refusal_fields(after)["reasonCode"] == "approval_required"
    old, new = cards(db)
    assert old.status == "invalidated" and old.result["reasonCode"] == "approved_tool_target_changed"
    assert new.status == "pending" and new.payload["arguments"]["workspace_id"] == "other-workspace"


def test_changing_the_workspace_makes_approving_a_pending_card_fail(db, world):
    honcho = connect(world, "honcho", HONCHO_KEY)
    approval_id = approval_card(world, content="x")
    patch(world, honcho["id"], {"methodConfig": {"workspaceId": "other-workspace"}})
    answered = approve(world, approval_id)
    assert answered.status_code == 200 and "No longer valid" in answered.get_data(as_text=True)
    (card,) = cards(db)
    assert card.status == "invalidated" and card.result["reasonCode"] == "approved_tool_target_changed"


def test_connection_without_a_workspace_passes_the_callers_workspace(db, world, live_server, honcho_server):
    honcho = connect(world, "honcho", HONCHO_KEY)
    connection = db.session.get(ToolConnection, uuid.UUID(honcho["id"]))
    connection.config = {
        **connection.config,
        "methodConfig": {},
    }  # a connection made before the field existed
    db.session.commit()

    async def scenario(session):
        tools = {t.name: t for t in (await session.list_tools()).tools}
        assert "workspace_id" in tools["honcho__search_memory"].input_schema["properties"]
        # Reads and writes are told apart by the MCP annotation, not by the tool's name.
        assert tools["honcho__search_memory"].annotations.read_only_hint is True
        assert tools["honcho__save_memory"].annotations.read_only_hint is False
        return await session.call_tool("honcho__search_memory", {"workspace_id": "mine", "query": "q"})

    result = run_agent(live_server, world.token, scenario)
    assert not result.is_error
    assert honcho_server.calls == [("search_memory", {"workspace_id": "mine", "query": "q"})]


# --- provider errors, credentials, revocation --------------------------------------------------------------------


def test_provider_errors_come_back_as_plain_iserror_results(app, db, world, live_server, notes_server):
    connect(world, "github", NOTES_KEY)

    async def scenario(session):
        tool_error = await session.call_tool("github__get_note", {"note_id": "missing"})
        app.config["PROVIDER_SERVER_URLS"] = {"github": "http://127.0.0.1:9/mcp"}
        unreachable = await session.call_tool("github__search_notes", {"query": "x"})
        return tool_error, unreachable

    tool_error, unreachable = run_agent(live_server, world.token, scenario)
    assert tool_error.is_error and "No note with id missing" in text_of(tool_error)
    assert unreachable.is_error and refusal_fields(unreachable)["reasonCode"] == "provider_error"
    assert "Could not reach the provider's MCP server" in text_of(unreachable)
    assert [r.details["outcome"] for r in gateway_activity(db)] == ["tool_error", "provider_error"]


def test_credentials_and_secret_arguments_never_appear_anywhere(db, world, honcho_server):
    def reveal_config() -> str:
        return f"configured with {HONCHO_KEY}"

    def store_secret(label: str, api_token: str) -> dict:
        honcho_server.record_call("store_secret", {"label": label})
        return {"stored": label}

    honcho_server.add_tool(reveal_config, read_only=True)
    honcho_server.add_tool(store_secret, read_only=False)
    connect(world, "honcho", HONCHO_KEY)
    raw = []
    raw.append(rpc(world.client, world.token, "initialize", {"protocolVersion": "2025-03-26"}).get_data())
    raw.append(rpc(world.client, world.token, "tools/list").get_data())
    leaked = rpc(world.client, world.token, "tools/call", {"name": "honcho__reveal_config", "arguments": {}})
    assert leaked.json["result"]["content"][0]["text"] == "configured with [redacted]"
    raw.append(leaked.get_data())
    asked = rpc(
        world.client,
        world.token,
        "tools/call",
        {"name": "honcho__store_secret", "arguments": {"label": "db", "api_token": SECRET_ARG}},
    )
    raw.append(asked.get_data())
    (card,) = cards(db)
    assert card.payload["arguments"] == {"label": "db", "api_token": "[redacted]"}
    raw.append(world.client.get(f"/tasks/{world.issue.id}").get_data())
    approved = approve(world, card.id)
    raw.append(approved.get_data())
    ran = rpc(
        world.client,
        world.token,
        "tools/call",
        {"name": "honcho__store_secret", "arguments": {"label": "db", "api_token": SECRET_ARG}},
    )
    assert ran.json["result"].get("isError") is False, ran.json
    raw.append(ran.get_data())
    db.session.expire_all()
    raw.append(json.dumps([r.details for r in db.session.scalars(select(ActivityLog))]).encode())
    raw.append(json.dumps([c.payload for c in cards(db)]).encode())
    for blob in raw:
        assert HONCHO_KEY.encode() not in blob and NOTES_KEY.encode() not in blob
        assert SECRET_ARG.encode() not in blob


def test_revoked_grant_or_removed_install_removes_tools_and_calls_fail_closed(
    db, world, live_server, honcho_server
):
    honcho = connect(world, "honcho", HONCHO_KEY)
    connection_id = uuid.UUID(honcho["id"])

    def listed():
        return {t["name"] for t in rpc(world.client, world.token, "tools/list").json["result"]["tools"]}

    def call():
        return rpc(
            world.client,
            world.token,
            "tools/call",
            {"name": "honcho__search_memory", "arguments": {"query": "q"}},
        )

    assert "honcho__search_memory" in listed()
    grant = db.session.scalar(select(ConnectionGrant).where(ConnectionGrant.connection_id == connection_id))
    grant.status = "revoked"
    db.session.commit()
    assert not any(n.startswith("honcho__") for n in listed())
    refused = call()
    assert refused.status_code == 200 and refused.json["error"] == {
        "code": -32602,
        "message": "Unknown tool: honcho__search_memory",
    }

    grant.status = "active"
    db.session.commit()
    assert call().json["result"]["isError"] is False
    for install in db.session.scalars(select(ConnectionInstall)):
        db.session.delete(install)
    db.session.commit()
    assert not any(n.startswith("honcho__") for n in listed())
    assert call().json["error"]["code"] == -32602
    assert len(honcho_server.calls) == 1
    assert [r.details["decision"] for r in gateway_activity(db)] == [
        "unknown_tool",
        "allowed",
        "unknown_tool",
    ]


# --- transport, run checks, and what a run is handed ---------------------------------------------------------------


def test_transport_rules_and_run_checks(db, world):
    client = world.client
    discovery = client.get(URL, headers=bearer(world.token))
    assert discovery.json == {"name": "switchboard-tool-gateway", "protocolVersion": "2025-03-26"}
    probe = client.get(URL, headers={**bearer(world.token), "Accept": "text/event-stream"})
    assert probe.status_code == 405 and probe.headers["Allow"] == "POST"
    # Refusals on the gateway are JSON-RPC errors (issue 34: every MCP client shows the reason).
    refused = client.get(URL)
    assert refused.status_code == 401
    assert refused.json == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32001, "message": TOKEN_INVALID["error"]},
    }
    assert rpc(client, "garbage", "tools/list").status_code == 401
    init = rpc(client, world.token, "initialize", {"protocolVersion": "2025-03-26"})
    assert init.json["result"]["serverInfo"] == {"name": "switchboard-tool-gateway", "version": "1"}
    assert "Mcp-Session-Id" not in init.headers
    unknown = rpc(client, world.token, "tools/call", {"name": "nope__tool"})
    assert unknown.status_code == 200 and unknown.json["error"]["code"] == -32602
    bad = rpc(client, world.token, "tools/call", {"name": "nope__tool", "arguments": [1]})
    assert bad.json["result"]["isError"] is True
    world.issue.status = "done"
    db.session.commit()
    closed = rpc(client, world.token, "tools/call", {"name": "x__y", "arguments": {}})
    assert closed.status_code == 200 and closed.json["result"]["isError"] is True
    world.run.status = "succeeded"
    db.session.commit()
    ended = rpc(client, world.token, "tools/list")
    assert ended.status_code == 403
    assert ended.json == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32001, "message": "Runtime tool token is no longer active"},
    }


def test_runs_are_told_where_the_gateway_is(db, world):
    descriptor = runtime_tools_descriptor(world.run)
    assert descriptor["gatewayMcpEndpoint"] == "http://127.0.0.1:5000/mcp/gateway"
    env = runtime_tools_env(descriptor)
    assert env["PAPERCLIP_TOOL_GATEWAY_MCP_URL"] == "http://127.0.0.1:5000/mcp/gateway"
    assert runtime_tools_env(None).get("PAPERCLIP_TOOL_GATEWAY_MCP_URL") is None


def test_concurrent_identical_calls_make_one_card_and_an_approval_runs_once(
    db, world, live_server, honcho_server
):
    import httpx

    connect(world, "honcho", HONCHO_KEY)
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "honcho__save_memory", "arguments": {"content": "same"}},
    }

    def burst(n):
        results = [None] * n
        barrier = threading.Barrier(n)

        def worker(i):
            barrier.wait()
            with httpx.Client(timeout=60) as http:
                results[i] = http.post(live_server, json=message, headers=bearer(world.token)).json()

        threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        return [r["result"] for r in results]

    first = burst(10)
    assert {refusal_fields(r)["reasonCode"] for r in first} == {"approval_required"}
    (approval_id,) = {refusal_fields(r)["approvalId"] for r in first}
    assert len(cards(db)) == 1
    assert approve(world, approval_id).status_code == 200
    second = burst(10)
    ran = [r for r in second if not r.get("isError")]
    assert len(ran) == 1
    assert len(honcho_server.calls) == 1
    waiting = {refusal_fields(r)["approvalId"] for r in second if r.get("isError")}
    assert len(waiting) == 1 and approval_id not in waiting
    assert sorted(c.status for c in cards(db)) == ["consumed", "pending"]


def test_answering_an_approval_wakes_the_agent_to_retry_or_move_on(db, world, live_server, honcho_server):
    import sys

    from app.models import WakeupRequest

    world.agent.adapter_type = "process"
    world.agent.adapter_config = {"command": [sys.executable, "-c", "print('ok')"]}
    db.session.commit()
    connect(world, "honcho", HONCHO_KEY)

    async def scenario(session):
        asked = await session.call_tool("honcho__save_memory", {"content": "likes tea"})
        return refusal_fields(asked)["approvalId"]

    approval_id = run_agent(live_server, world.token, scenario)
    assert approve(world, approval_id).status_code == 200
    db.session.expire_all()
    wakes = db.session.scalars(select(WakeupRequest).where(WakeupRequest.source == "tool_approval")).all()
    assert [(w.agent_id, w.reason) for w in wakes] == [
        (world.agent.id, "Your request to call save_memory was answered: approved.")
    ]
    # It queues behind the run that is still active on the task instead of starting a second one.
    assert wakes[0].status == "queued" and wakes[0].run_id is None


def test_projected_schemas_hide_managed_arguments_and_leave_the_stored_schema_alone():
    from app.services.gateway.arguments import project_schema

    stored = {
        "type": "object",
        "properties": {"workspace_id": {"type": "string"}, "query": {"type": "string"}},
        "required": ["workspace_id", "query"],
    }
    snapshot = json.loads(json.dumps(stored))
    projected = project_schema(stored, {"workspace_id": "team"})
    assert projected == {
        "type": "object",
        "properties": {"query": {"type": "string"}},
        "required": ["query"],
    }
    assert stored == snapshot
    only_managed = project_schema(
        {"properties": {"workspace_id": {}}, "required": ["workspace_id"]}, {"workspace_id": "t"}
    )
    assert only_managed == {"type": "object", "properties": {}}
    assert project_schema(None, {}) == {"type": "object", "properties": {}}


def test_a_listing_is_reused_until_an_access_write_changes_it(db, world):
    from app.extensions import db as _db

    created = connect(world, "github", NOTES_KEY, name="Notes")

    def listed():
        return [t["name"] for t in rpc(world.client, world.token, "tools/list").json["result"]["tools"]]

    first = listed()
    assert "notes__search_notes" in first
    with count_statements(_db.engine) as statements:
        assert listed() == first
    # The address's shared count of failed authentications (issue 31), the run and its company's access revision,
    # and the listing's entry in the run's decision timeline (issue 28).
    assert len(statements) == 3 and "throttle_hits" in statements[0]
    assert statements[2].startswith("INSERT INTO activity_log")
    patch(world, created["id"], {"toolPolicies": {"search_notes": "block"}})
    assert listed() == [name for name in first if name != "notes__search_notes"]


# --- provider sessions ---------------------------------------------------------------------------------------------


def test_sequential_gateway_calls_open_one_provider_session(db, world, notes_server):
    connect(world, "github", NOTES_KEY)
    notes_server.reset()  # forget the connect-time listing (its own session, setup is not the hot path)
    for _ in range(6):
        response = rpc(
            world.client,
            world.token,
            "tools/call",
            {"name": "github__get_note", "arguments": {"note_id": "n1"}},
        )
        assert response.json["result"]["isError"] is False, response.json
    posts = [r for r in notes_server.requests if r.method == "POST"]
    assert len(notes_server.calls) == 6
    assert len(posts) == 2 + 6  # one initialize + initialized, then one POST per call (not 3 per call)
    assert {r.auth for r in posts} == {"ok"}
