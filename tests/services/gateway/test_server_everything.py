"""`@modelcontextprotocol/server-everything` (the official reference server, streamable HTTP) behind the gateway.

The same calls go to the server directly and through `/mcp/gateway`, each with the official Python SDK client, and the
answers must be the same field by field: echo, an image, an embedded resource, resource links and reading them
(`resources/read`), structured content, and progress. Only what the gateway renames differs: tool names
(`everything__<tool>`) and resource URIs (namespaced per connection, `app.services.gateway.resource_uris`), and
those are checked to name the provider's own. The server stamps its resources with the time of day, so those stamps
are blanked on both sides before comparing.
"""

from __future__ import annotations

import asyncio
import base64
import re
from contextlib import asynccontextmanager

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from app.services.gateway import resource_uris
from tests.peers.everything import installed, serving_everything
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import agent_session, connect

world = test_gateway.world
live_server = test_gateway.live_server

pytestmark = pytest.mark.skipif(not installed(), reason="server-everything peer not installed (make peers)")

PREFIX = "everything__"
_STAMP = re.compile(r"created at \d{1,2}:\d{2}:\d{2}(\s?[AP]M)?")


@pytest.fixture(scope="module")
def everything_url():
    with serving_everything() as url:
        yield url


@pytest.fixture
def everything(app, world, everything_url):
    saved = app.config["PROVIDER_SERVER_URLS"]
    app.config["PROVIDER_SERVER_URLS"] = {**saved, "github": everything_url}
    connection = connect(world, "github", "everything-key", name="Everything")
    yield connection
    app.config["PROVIDER_SERVER_URLS"] = saved


@asynccontextmanager
async def direct_session(url):
    http = create_mcp_http_client()
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        yield session


def unstamped(value):
    """`value` with the server's time-of-day stamps blanked, in text and inside base64 blobs."""
    if isinstance(value, dict):
        out = {k: unstamped(v) for k, v in value.items()}
        if isinstance(value.get("blob"), str):
            decoded = base64.b64decode(value["blob"]).decode("utf-8", "replace")
            out["blob"] = _STAMP.sub("created at <time>", decoded)
        return out
    if isinstance(value, list):
        return [unstamped(v) for v in value]
    if isinstance(value, str):
        return _STAMP.sub("created at <time>", value)
    return value


def dumped(result) -> dict:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def provider_uri(uri: str, connection_id: str) -> str:
    """The provider's URI behind a gateway URI (which must be namespaced for this connection)."""
    ref = resource_uris.parse(uri)
    assert ref is not None, uri
    assert str(ref.connection_id) == connection_id
    return ref.provider_uri


CALLS = [
    ("echo", {"message": "hello from the agent"}),
    ("get-tiny-image", {}),
    ("get-resource-reference", {"resourceType": "Text", "resourceId": 2}),
    ("get-resource-reference", {"resourceType": "Blob", "resourceId": 3}),
    ("get-structured-content", {"location": "Chicago"}),
    ("get-sum", {"a": 2, "b": 40}),
    ("get-annotated-message", {"messageType": "error", "includeImage": True}),
]


def test_calls_answer_the_same_directly_and_through_the_gateway(
    db, world, live_server, everything, everything_url
):
    async def both():
        async with direct_session(everything_url) as direct, agent_session(live_server, world.token) as agent:
            listed_direct = {t.name: dumped(t) for t in (await direct.list_tools()).tools}
            listed_agent = {t.name: dumped(t) for t in (await agent.list_tools()).tools}
            answers = []
            for name, arguments in CALLS:
                mine = await direct.call_tool(name, arguments)
                theirs = await agent.call_tool(PREFIX + name, arguments)
                answers.append((name, dumped(mine), dumped(theirs)))
            return listed_direct, listed_agent, answers

    listed_direct, listed_agent, answers = asyncio.run(asyncio.wait_for(both(), timeout=120))
    # Every tool is listed, with the provider's title, output schema, annotations and _meta as it said them.
    assert sorted(listed_agent) == sorted(PREFIX + name for name in listed_direct)
    for name, tool in listed_direct.items():
        through = listed_agent[PREFIX + name]
        for field in ("title", "inputSchema", "outputSchema", "annotations", "_meta"):
            assert through.get(field) == tool.get(field), (name, field)
    for name, mine, theirs in answers:
        assert not mine.get("isError"), (name, mine)
        assert unstamped(theirs) == unstamped(mine), name
    kinds = {block["type"] for _, mine, _ in answers for block in mine["content"]}
    assert kinds == {"text", "image", "resource"}  # the calls cover every kind they were chosen for
    structured = next(theirs for name, _, theirs in answers if name == "get-structured-content")
    assert structured["structuredContent"] == {
        "temperature": 36,
        "conditions": "Light rain / drizzle",
        "humidity": 82,
    }


def test_resource_links_are_namespaced_and_read_through_the_gateway(
    db, world, live_server, everything, everything_url
):
    connection_id = everything["id"]

    async def both():
        async with direct_session(everything_url) as direct, agent_session(live_server, world.token) as agent:
            mine = dumped(await direct.call_tool("get-resource-links", {"count": 4}))
            theirs = dumped(await agent.call_tool(PREFIX + "get-resource-links", {"count": 4}))
            links = [block for block in theirs["content"] if block["type"] == "resource_link"]
            reads = []
            for link in links:
                original = provider_uri(link["uri"], connection_id)
                reads.append(
                    (
                        link["uri"],
                        dumped(await direct.read_resource(original)),
                        dumped(await agent.read_resource(link["uri"])),
                    )
                )
            return mine, theirs, reads

    mine, theirs, reads = asyncio.run(asyncio.wait_for(both(), timeout=120))
    assert len(reads) == 4
    # The links are the provider's, field by field, except each URI, which names the provider's own.
    renamed = {
        **theirs,
        "content": [
            {**block, "uri": provider_uri(block["uri"], connection_id)}
            if block["type"] == "resource_link"
            else block
            for block in theirs["content"]
        ],
    }
    assert renamed == mine
    for uri, direct_read, gateway_read in reads:
        assert [item["uri"] for item in gateway_read["contents"]] == [uri]
        renamed_read = {
            **gateway_read,
            "contents": [
                {**item, "uri": provider_uri(item["uri"], connection_id)} for item in gateway_read["contents"]
            ],
        }
        assert unstamped(renamed_read) == unstamped(direct_read)
    kinds = {("text" in item, "blob" in item) for _, read, _ in reads for item in read["contents"]}
    assert kinds == {(True, False), (False, True)}  # text and blob contents both came through


def test_progress_is_the_same_directly_and_through_the_gateway(
    db, world, live_server, everything, everything_url
):
    arguments = {"duration": 0.3, "steps": 3}

    async def both():
        seen: dict[str, list] = {"direct": [], "gateway": []}

        def sink(label):
            async def on_progress(progress, total, message):
                seen[label].append((progress, total, message))

            return on_progress

        async with direct_session(everything_url) as direct, agent_session(live_server, world.token) as agent:
            mine = await direct.call_tool(
                "trigger-long-running-operation", arguments, progress_callback=sink("direct")
            )
            theirs = await agent.call_tool(
                PREFIX + "trigger-long-running-operation", arguments, progress_callback=sink("gateway")
            )
        return dumped(mine), dumped(theirs), seen

    mine, theirs, seen = asyncio.run(asyncio.wait_for(both(), timeout=120))
    assert theirs == mine
    assert seen["direct"] == [(1, 3, None), (2, 3, None), (3, 3, None)]
    assert seen["gateway"] == seen["direct"]
