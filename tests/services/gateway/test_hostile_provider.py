"""Issue 33 item 5: a hostile provider (the official MCP SDK on loopback) cannot blow up the index, the Permissions
page, the agent's context or the server's memory: tool count, description and schema sizes are bounded at indexing
with what was left out shown, and a call's result is cut with a note (or not read past the HTTP ceiling)."""

from __future__ import annotations

import subprocess
import sys
import time
import tracemalloc
import uuid

import pytest
from sqlalchemy import func, select

from app.models import ConnectionTool
from app.services.gateway.result_limits import CUT_NOTE
from tests.doors import rpc
from tests.paths import ROOT
from tests.peers.mcp_servers import NOTES_KEY, start_hostile_provider
from tests.services.gateway.test_gateway import api, connect, world  # noqa: F401


@pytest.fixture
def hostile(app, mcp_server_factory):
    """Point the catalog's github app at a hostile provider started with the given shape."""
    saved = app.config.get("PROVIDER_SERVER_URLS")

    def start(**shape):
        server = mcp_server_factory(start_hostile_provider, **shape)
        app.config["PROVIDER_SERVER_URLS"] = {**(saved or {}), "github": server.url}
        return server

    yield start
    app.config["PROVIDER_SERVER_URLS"] = saved


def tool_rows(db, connection_id) -> int:
    db.session.expire_all()
    return db.session.scalar(
        select(func.count()).where(ConnectionTool.connection_id == uuid.UUID(connection_id))
    )


def test_twenty_thousand_tools_index_only_the_first_five_hundred_quickly(db, world, hostile):  # noqa: F811
    server = hostile(tool_count=20_000, page_size=1000)
    started = time.monotonic()
    connection = connect(world, "github", NOTES_KEY)
    elapsed = time.monotonic() - started
    assert elapsed < 30, f"indexing took {elapsed:.1f} s"
    assert tool_rows(db, connection["id"]) == 500
    pages = [args for name, args in server.calls if name == "tools/list"]
    assert len(pages) == 1  # paging stopped once more than 500 were seen
    page = world.client.get(f"/apps/{connection['id']}/permissions").get_data(as_text=True)
    assert (
        "The provider offers more than 500 tools; only the first 500 were indexed. Agents cannot see or call the "
        "others." in page
    )
    listed = rpc(world.client, world.token, "tools/list").json["result"]["tools"]
    assert len([t for t in listed if t["name"].startswith("github__")]) == 500


def test_a_tool_list_past_the_http_ceiling_is_refused(db, world, hostile):  # noqa: F811
    hostile(tool_count=20, description_chars=1_000_000)  # 20 MB of tools/list
    body = {"appSlug": "github", "identity": "organization", "credentials": {"authorization": NOTES_KEY}}
    refused = api(
        world.client, world.csrf, "POST", f"/api/companies/{world.company.id}/tools/apps/connect", body
    )
    assert refused.status_code == 422
    assert (
        refused.json["error"]
        == "The provider's answer was larger than 8 MiB, so Switchboard stopped reading it."
    )
    db.session.expire_all()
    assert db.session.scalar(select(func.count()).select_from(ConnectionTool)) == 0


def test_huge_descriptions_are_cut_and_huge_schemas_left_out(db, world, hostile):  # noqa: F811
    hostile(tool_count=20, description_chars=300_000, big_schema_tools=2)
    connection = connect(world, "github", NOTES_KEY)
    assert tool_rows(db, connection["id"]) == 18
    response = world.client.get(f"/apps/{connection['id']}/permissions")
    page = response.get_data(as_text=True)
    assert len(page) < 200_000, f"the Permissions page is {len(page):,} characters"
    assert (
        "2 tool(s) were left out because their input schema is larger than 65,536 bytes: read_0, read_1."
        in page
    )
    assert "18 tool(s) description(s)" not in page
    assert "18 tool description(s) were cut to 4,000 characters: read_2, read_3," in page
    listing = rpc(world.client, world.token, "tools/list")
    assert len(listing.get_data()) < 200_000
    [entry] = [t for t in listing.json["result"]["tools"] if t["name"] == "github__read_2"]
    assert entry["description"].startswith("Tool 2 ddd")
    assert "… [cut by Switchboard: 296,000 more characters]" in entry["description"]


def test_a_large_result_reaches_the_agent_cut_with_a_note(db, world, hostile):  # noqa: F811
    hostile(tool_count=1, result_chars=3_000_000)
    connect(world, "github", NOTES_KEY)
    answer = rpc(world.client, world.token, "tools/call", {"name": "github__read_0", "arguments": {}})
    result = answer.json["result"]
    assert result["isError"] is False
    [text, note] = result["content"]
    assert text["text"] == "r" * 100_000
    assert note["text"] == CUT_NOTE.format(cut=2_900_000, total=3_000_000, structured="", limit=100_000)
    assert note["text"] == (
        "[Switchboard cut this result: 2,900,000 of its 3,000,000 characters were left out (the limit is 100,000 "
        "characters per result). Ask the tool for less, for example a narrower query or one page at a time.]"
    )


@pytest.fixture
def hostile_process(app):
    """The hostile provider in a process of its own, so measuring this process's memory measures only the client."""
    code = (
        "import sys, time\n"
        "from tests.peers.mcp_servers import start_hostile_provider\n"
        "server = start_hostile_provider(tool_count=1, result_chars=100 * 1024 * 1024)\n"
        "print(server.url, flush=True)\n"
        "sys.stdin.read()\n"
    )
    peer = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    saved = app.config.get("PROVIDER_SERVER_URLS")
    try:
        url = peer.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:"), "the provider did not start"
        app.config["PROVIDER_SERVER_URLS"] = {**(saved or {}), "github": url}
        yield peer
    finally:
        app.config["PROVIDER_SERVER_URLS"] = saved
        peer.stdin.close()
        peer.kill()
        peer.wait(10)


def test_an_answer_past_the_http_ceiling_is_not_read(app, db, world, hostile_process):  # noqa: F811
    connect(world, "github", NOTES_KEY)
    tracemalloc.start()
    try:
        answer = rpc(world.client, world.token, "tools/call", {"name": "github__read_0", "arguments": {}})
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    result = answer.json["result"]
    assert result["isError"] is True
    assert result["content"][0]["text"].endswith(
        "The provider's answer was larger than 8 MiB, so Switchboard stopped reading it. Ask the tool for less, "
        "for example a narrower query or one page at a time."
    )
    assert peak < 64 * 1024 * 1024, f"{peak:,} bytes at the peak"


def test_an_event_stream_answer_past_the_http_ceiling_is_abandoned(db, world, hostile):  # noqa: F811
    hostile(tool_count=1, result_chars=20 * 1024 * 1024, json_response=False)  # the result as an SSE event
    connect(world, "github", NOTES_KEY)
    started = time.monotonic()
    answer = rpc(world.client, world.token, "tools/call", {"name": "github__read_0", "arguments": {}})
    assert time.monotonic() - started < 20
    result = answer.json["result"]
    assert result["isError"] is True
    assert len(answer.get_data()) < 10_000
    assert result["content"][0]["text"] == (
        "provider_error: The call to GitHub failed: The provider's answer was larger than 1 MiB, so Switchboard "
        "stopped reading it. Ask the tool for less, for example a narrower query or one page at a time."
    )
