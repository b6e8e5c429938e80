"""Meta tools (issue 32 item 2): above the threshold `tools/list` is `search_tools`, `describe_tool` and `call_tool`,
and a call through `call_tool` takes the direct call's path (the official MCP SDK client as the agent, real provider
peers on loopback)."""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from app.extensions import db as _db
from app.models import ToolConnection
from app.services.gateway import meta_tools
from app.services.runtime.context import READ_ONLY_KEY
from tests.conftest import count_statements
from tests.doors import refusal_fields, rpc
from tests.peers.mcp_servers import HONCHO_KEY, NOTES_KEY
from tests.services.gateway.test_gateway import (
    approve,
    cards,
    connect,
    gateway_activity,
    live_server,  # noqa: F401 (a fixture)
    patch,
    run_agent,
    text_of,
    world,  # noqa: F401 (a fixture)
)

META = ["search_tools", "describe_tool", "call_tool"]
CONNECTIONS = 8


@pytest.fixture
def many(world):  # noqa: F811 (the fixture above)
    """Eight notes connections (Notes 1..8) and Honcho: dozens of tools."""
    for n in range(1, CONNECTIONS + 1):
        connect(world, "github", NOTES_KEY, name=f"Notes {n}")
    connect(world, "honcho", HONCHO_KEY)
    return world


def listed(world):  # noqa: F811
    response = rpc(world.client, world.token, "tools/list")
    assert response.status_code == 200, response.json
    return response.json["result"]["tools"]


def above(app, monkeypatch, *, tools=0, tokens=0):
    monkeypatch.setitem(app.config, "GATEWAY_META_TOOLS_ABOVE_TOOLS", tools)
    monkeypatch.setitem(app.config, "GATEWAY_META_TOOLS_ABOVE_TOKENS", tokens)


def test_below_the_threshold_the_plain_listing_above_it_exactly_the_meta_tools(app, db, many, monkeypatch):
    above(app, monkeypatch)
    plain = listed(many)
    count, tokens = len(plain), len(json.dumps(plain)) // meta_tools.CHARS_PER_TOKEN
    assert count > 20 and "honcho__save_memory" in {t["name"] for t in plain}
    above(app, monkeypatch, tools=count)  # at the threshold: still the plain listing
    assert listed(many) == plain
    above(app, monkeypatch, tools=count - 1)
    assert [t["name"] for t in listed(many)] == META
    above(app, monkeypatch, tokens=tokens + 100)
    assert listed(many) == plain
    above(app, monkeypatch, tokens=tokens // 2)
    meta = listed(many)
    assert meta == meta_tools.DEFINITIONS
    # The meta listing costs a small fixed share of the plain one.
    assert len(json.dumps(meta)) * 5 < len(json.dumps(plain))  # fixed: ~350 tokens, whatever the count


def pin(world, connection_id, tool, action, pinned):  # noqa: F811
    """The Permissions page's tool row saved (its htmx form: the action and the Pin box)."""
    data = {"tool": tool, "action": action, **({"pinned": "1"} if pinned else {})}
    response = world.client.post(
        f"/apps/{connection_id}/tools/policy",
        data=data,
        headers={"X-CSRFToken": world.csrf, "HX-Request": "true"},
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    return response.get_data(as_text=True)


def test_above_the_threshold_pinned_tools_are_listed_before_the_meta_tools(app, db, many, monkeypatch):
    above(app, monkeypatch)
    honcho = _db.session.scalar(select(ToolConnection).where(ToolConnection.app_slug == "honcho"))
    row = pin(many, honcho.id, "save_memory", "allow", True)
    assert 'name="pinned" value="1" checked' in row
    plain = {t["name"]: t for t in listed(many)}
    above(app, monkeypatch, tools=1)
    assert listed(many) == [plain["honcho__save_memory"], *meta_tools.DEFINITIONS]
    # A read-only assistant is not listed a pinned tool that changes things.
    run = many.run
    run.context_snapshot = {**(run.context_snapshot or {}), READ_ONLY_KEY: True}
    _db.session.commit()
    assert [t["name"] for t in listed(many)] == META
    run.context_snapshot = {k: v for k, v in run.context_snapshot.items() if k != READ_ONLY_KEY}
    _db.session.commit()
    row = pin(many, honcho.id, "save_memory", "allow", False)
    assert 'name="pinned" value="1">' in row
    assert [t["name"] for t in listed(many)] == META
    # A blocked tool is not listed, pinned or not.
    pin(many, honcho.id, "save_memory", "block", True)
    assert [t["name"] for t in listed(many)] == META


def test_the_meta_listing_reads_no_more_statements_than_the_plain_one(app, db, many, monkeypatch):
    def statements():
        with count_statements(_db.engine) as seen:
            listed(many)
        return len(seen)

    above(app, monkeypatch)
    rebuilt = statements()  # the listing built (and kept for this access revision)
    kept = statements()
    above(app, monkeypatch, tools=1)
    assert statements() == kept
    connect(many, "github", NOTES_KEY, name="Notes 9")  # more tools, a new access revision: built again
    assert statements() == rebuilt
    assert statements() == kept


def test_search_finds_the_tool_and_describe_gives_its_schemas(app, db, many, live_server, monkeypatch):  # noqa: F811
    above(app, monkeypatch)
    plain = {t["name"]: t for t in listed(many)}
    above(app, monkeypatch, tools=1)

    async def scenario(session):
        listing = [t.name for t in (await session.list_tools()).tools]
        found = await session.call_tool("search_tools", {"query": "save a memory", "limit": 3})
        notes = await session.call_tool("search_tools", {"query": "notes 3 get note"})
        described = await session.call_tool("describe_tool", {"name": "honcho__save_memory"})
        unknown = await session.call_tool("describe_tool", {"name": "nope__nothing"})
        empty = await session.call_tool("search_tools", {"query": "  "})
        return listing, found, notes, described, unknown, empty

    listing, found, notes, described, unknown, empty = run_agent(live_server, many.token, scenario)
    assert listing == META
    lines = text_of(found).split("\n")
    assert lines[0].startswith("honcho__save_memory: ") and len(lines) <= 3
    assert text_of(notes).split("\n")[0].startswith("notes-3__get_note")
    entry = json.loads(text_of(described))
    assert entry == plain["honcho__save_memory"]
    assert "workspace_id" not in json.dumps(entry["inputSchema"])  # the managed argument stays hidden
    assert unknown.is_error and text_of(unknown) == meta_tools_error()
    assert empty.is_error and "query" in text_of(empty)
    assert gateway_activity(db) == []  # searching and describing are not tool calls


def meta_tools_error():
    from app.web.agents.gateway import META_NAME_ERROR

    return META_NAME_ERROR


def test_call_tool_takes_the_direct_calls_path_approval_block_and_all(
    app,
    db,
    many,
    live_server,  # noqa: F811
    monkeypatch,
    notes_server,
    honcho_server,
):
    above(app, monkeypatch, tools=1)
    patch(
        many,
        connect(many, "github", NOTES_KEY, name="Blocked")["id"],
        {"toolPolicies": {"search_notes": "block"}},
    )
    state = {}

    async def scenario(session):
        via = {"name": "honcho__save_memory", "arguments": {"content": "likes tea"}}
        first = await session.call_tool("call_tool", via)
        assert first.is_error and refusal_fields(first)["reasonCode"] == "approval_required"
        direct = await session.call_tool("honcho__save_memory", {"content": "likes tea"})
        # The same card: a direct call of the same arguments waits for the approval the meta call opened.
        assert refusal_fields(direct)["approvalId"] == refusal_fields(first)["approvalId"]
        state["approval_id"] = refusal_fields(first)["approvalId"]
        assert approve(many, state["approval_id"]).status_code == 200
        ran = await session.call_tool("call_tool", via)
        blocked = await session.call_tool(
            "call_tool", {"name": "blocked__search_notes", "arguments": {"query": "x"}}
        )
        nested = await session.call_tool("call_tool", {"name": "call_tool", "arguments": via})
        return ran, blocked, nested

    ran, blocked, nested = run_agent(live_server, many.token, scenario)
    assert not ran.is_error and ran.structured_content["received"] == {
        "workspace_id": "team-workspace",
        "content": "likes tea",
    }
    assert honcho_server.calls == [
        ("save_memory", {"workspace_id": "team-workspace", "content": "likes tea"})
    ]
    assert blocked.is_error and text_of(blocked).startswith("tool_blocked:")
    assert notes_server.calls == []
    assert nested.is_error and text_of(nested) == meta_tools_error()
    assert [(str(c.id), c.status) for c in cards(db)] == [(state["approval_id"], "consumed")]
    rows = gateway_activity(db)
    assert [r.details["decision"] for r in rows] == [
        "approval_required",
        "approval_required",
        "approved",
        "tool_blocked",
    ]
    # Activity names the underlying tool, never the meta tool; the direct call's row is the meta calls' twin.
    assert [r.details["tool"] for r in rows] == ["honcho__save_memory"] * 3 + ["blocked__search_notes"]
    assert (
        rows[0].details["argumentsDigest"]
        == rows[1].details["argumentsDigest"]
        == rows[2].details["argumentsDigest"]
    )


def test_an_unknown_tool_through_call_tool_is_unknown_as_a_direct_call(app, db, many, monkeypatch):
    above(app, monkeypatch, tools=1)
    via = rpc(many.client, many.token, "tools/call", {"name": "call_tool", "arguments": {"name": "nope__x"}})
    direct = rpc(many.client, many.token, "tools/call", {"name": "nope__x", "arguments": {}})
    assert via.status_code == direct.status_code == 200
    assert via.json["error"] == direct.json["error"] == {"code": -32602, "message": "Unknown tool: nope__x"}


def test_a_read_only_assistant_reaches_through_call_tool_only_what_it_may(app, db, many, monkeypatch):
    """Connected read-only: search and describe show no tool that changes things, and call_tool refuses one as a
    direct call does."""
    above(app, monkeypatch, tools=1)
    many.run.context_snapshot = {**(many.run.context_snapshot or {}), READ_ONLY_KEY: True}
    db.session.commit()

    def call(name, arguments):
        return rpc(many.client, many.token, "tools/call", {"name": name, "arguments": arguments}).json[
            "result"
        ]

    found = call("search_tools", {"query": "save memory honcho", "limit": 50})["content"][0]["text"]
    assert "honcho__search_memory" in found and "honcho__save_memory" not in found
    described = call("describe_tool", {"name": "honcho__save_memory"})
    assert described["isError"] is True
    via = call("call_tool", {"name": "honcho__save_memory", "arguments": {"content": "x"}})
    direct = call("honcho__save_memory", {"content": "x"})
    assert via == direct and refusal_fields(via)["reasonCode"] == "read_only_assistant"


def test_limits_count_call_tool_and_direct_calls_as_one(app, db, many, monkeypatch, notes_server):
    """The loop breaker sees a call through call_tool and a direct call of the same tool and arguments as the same
    call, and refuses the third either way."""
    from tests.services.gateway.test_call_limits import set_limits

    above(app, monkeypatch, tools=1)
    connection_id = db.session.scalar(select(ToolConnection.id).where(ToolConnection.name == "Notes 1"))
    set_limits(many, connection_id, loop_repeats=2, loop_seconds=120)

    def call(name, arguments):
        return rpc(many.client, many.token, "tools/call", {"name": name, "arguments": arguments}).json[
            "result"
        ]

    via = {"name": "notes-1__get_note", "arguments": {"note_id": "n1"}}
    assert call("notes-1__get_note", {"note_id": "n1"}).get("isError") is not True
    assert call("call_tool", via).get("isError") is not True
    looped = refusal_fields(call("call_tool", via))
    assert looped["reasonCode"] == "loop_detected"
    assert refusal_fields(call("notes-1__get_note", {"note_id": "n1"}))["reasonCode"] == "loop_detected"
    assert len([c for c in notes_server.calls if c[0] == "get_note"]) == 2


def test_search_finds_a_tool_by_a_synonym_of_its_verb_and_counts_a_word_once():
    from app.core.raw_json import RawJSON

    tools = [
        {"name": f"crm__{verb}_deal", "description": f"{verb.capitalize()} a deal.", "inputSchema": {}}
        for verb in ("list", "create", "delete", "archive", "search")
    ]
    index = meta_tools.ToolIndex.of(RawJSON.of(tools))
    assert [name for name, _ in meta_tools.search(index, "remove a deal", 1)] == ["crm__delete_deal"]
    assert [name for name, _ in meta_tools.search(index, "add deals", 1)] == ["crm__create_deal"]
    assert [name for name, _ in meta_tools.search(index, "close out the deal", 1)] == ["crm__archive_deal"]
    assert [name for name, _ in meta_tools.search(index, "find a deal", 1)] == ["crm__search_deal"]
    # "add" stands for "create" and "new": a tool holding both words scores for the query word once.
    assert meta_tools._terms("Add boxes") == [("add", "create", "new", "insert"), ("box",)]
