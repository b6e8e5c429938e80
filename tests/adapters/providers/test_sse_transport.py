"""Methods marked `transport: sse`: the provider client speaks the older HTTP+SSE transport (a real SDK server serving
`/sse` and `/messages/`) with the same outbound guard, timeouts, limits and error mapping as streamable HTTP, behind
the gateway; `switchboard catalog import` turns a registry document's `sse` remotes into such methods."""

from __future__ import annotations

import json
import threading

import anyio
import pytest

from app.adapters.providers import limits as provider_limits
from app.adapters.providers import mcp_client, session_pool
from app.adapters.providers.errors import (
    ProviderAuthRejected,
    ProviderPaused,
    ProviderTimeout,
    ProviderUnavailable,
)
from app.catalog.loader import get_app, validate_definition
from tests.catalog.test_catalog_import import FIXTURES, SCHEMA_URL, extra_dir, run_import, write_document  # noqa: F401
from tests.paths import ROOT
from tests.peers.mcp_servers import NOTES_KEY, RequestRecord, RunningMcpServer, start_notes_server
from tests.services.gateway.test_gateway import connect, gateway_activity, live_server, run_agent, text_of  # noqa: F401
from tests.services.gateway.test_gateway import world as world  # noqa: F401  (the shared fixture)

AUTH = {"Authorization": f"Bearer {NOTES_KEY}"}
DEFINITIONS = ROOT / "app" / "catalog" / "definitions"


@pytest.fixture
def sse_notes(mcp_server_factory) -> RunningMcpServer:
    """The notes peer served over HTTP+SSE only; key `notes-key-123` as `Authorization: Bearer ...`."""
    return mcp_server_factory(start_notes_server, transport="sse")


# --- the definition schema ---------------------------------------------------------------------------------------


def test_a_method_names_one_of_the_two_transports(db):
    webflow = json.loads((DEFINITIONS / "webflow.json").read_text(encoding="utf-8"))
    _definition, problems = validate_definition(webflow, "webflow.json")
    assert problems == []
    assert [(m.key, m.transport) for m in get_app("webflow").methods] == [
        ("mcp-oauth", "mcp_remote"),
        ("sse-oauth", "sse"),
    ]
    webflow["methods"][1]["transport"] = "websocket"
    assert validate_definition(webflow, "webflow.json")[1] == [
        "webflow.json: methods[1].transport: must be one of 'mcp_remote' or 'sse'"
    ]


# --- the provider client -----------------------------------------------------------------------------------------


def test_list_and_call_over_sse_share_one_session(sse_notes):
    tools = mcp_client.list_tools(sse_notes.url, headers=AUTH, transport="sse")
    assert [t.name for t in tools] == ["search_notes", "create_note", "get_note"]
    found = mcp_client.call_tool(
        sse_notes.url, headers=AUTH, tool_name="search_notes", arguments={"query": "plan"}, transport="sse"
    )
    assert found == {
        "content": [{"type": "text", "text": "Quarterly planning"}],
        "structuredContent": {"result": ["Quarterly planning"]},
        "isError": False,
        "_meta": None,
    }
    missing = mcp_client.call_tool(
        sse_notes.url, headers=AUTH, tool_name="get_note", arguments={"note_id": "zz"}, transport="sse"
    )
    assert missing["isError"] is True
    assert missing["content"] == [
        {"type": "text", "text": "Error executing tool get_note: No note with id zz"}
    ]
    assert sse_notes.calls == [("search_notes", {"query": "plan"}), ("get_note", {"note_id": "zz"})]
    # list_tools: its own stream (initialize, initialized, tools/list); the two calls: one pooled stream.
    assert [(r.method, r.path) for r in sse_notes.requests] == [
        ("GET", "/sse"),
        *[("POST", "/messages/")] * 3,
        ("GET", "/sse"),
        *[("POST", "/messages/")] * 4,
    ]
    assert all(r.auth == "ok" for r in sse_notes.requests)


def test_sse_failures_map_to_the_same_plain_errors(sse_notes):
    with pytest.raises(ProviderAuthRejected) as rejected:
        mcp_client.list_tools(sse_notes.url, headers={"Authorization": "Bearer wrong-key"}, transport="sse")
    assert rejected.value.message == "The provider rejected the credentials (HTTP 401 Unauthorized)."
    assert "wrong-key" not in str(rejected.value)

    # A streamable HTTP client at an SSE-only server: the POST is refused, in the same words as any HTTP failure.
    with pytest.raises(ProviderUnavailable) as wrong_transport:
        mcp_client.list_tools(sse_notes.url, headers=AUTH)
    assert wrong_transport.value.message == (
        "Could not reach the provider's MCP server: the server answered HTTP 405 Method Not Allowed."
    )

    # The outbound guard (a member-typed address): loopback is refused before any request reaches the peer, in the
    # words streamable HTTP uses for it.
    before = len(sse_notes.requests)
    refusals = []
    for transport in ("sse", "mcp_remote"):
        with pytest.raises(ProviderUnavailable) as guarded:
            mcp_client.list_tools(sse_notes.url, headers=AUTH, guard=frozenset(), transport=transport)
        refusals.append(guarded.value.message)
    assert refusals == ["Could not reach the provider's MCP server: could not connect."] * 2
    assert len(sse_notes.requests) == before


def _frozen_sse_server(mcp_server_factory) -> tuple[RunningMcpServer, threading.Event]:
    release = threading.Event()

    def start() -> RunningMcpServer:
        server = RunningMcpServer("frozen-sse", required_key=NOTES_KEY, transport="sse")

        async def wait_for_release(label: str) -> str:
            server.record_call("wait_for_release", {"label": label})
            await anyio.to_thread.run_sync(release.wait, abandon_on_cancel=True)
            return f"released {label}"

        server.add_tool(wait_for_release, description="Answer once released.", read_only=True)
        return server.start()

    return mcp_server_factory(start), release


def test_sse_calls_keep_the_call_timeout_and_the_provider_limits(mcp_server_factory):
    frozen, release = _frozen_sse_server(mcp_server_factory)
    limits = provider_limits.Limits(max_concurrent=2, failure_threshold=1, reset_seconds=30)

    def call(label: str) -> dict:
        return mcp_client.call_tool(
            frozen.url,
            headers=AUTH,
            tool_name="wait_for_release",
            arguments={"label": label},
            timeout=0.5,
            limits=limits,
            transport="sse",
        )

    try:
        with pytest.raises(ProviderTimeout) as timed_out:
            call("a")
        assert timed_out.value.message == "The provider's MCP server did not answer within 0.5 seconds."
        # One timeout opens this breaker: the next call is refused at once, without reaching the provider.
        with pytest.raises(ProviderPaused):
            call("b")
        assert frozen.calls == [("wait_for_release", {"label": "a"})]
    finally:
        release.set()


def test_the_pool_never_mixes_transports():
    streamable = session_pool.key_for("https://x.example/mcp", AUTH, None, 30.0)
    sse = session_pool.key_for("https://x.example/mcp", AUTH, None, 30.0, "sse")
    assert streamable != sse
    assert (streamable[-1], sse[-1]) == ("mcp_remote", "sse")


# --- import and the gateway --------------------------------------------------------------------------------------


def test_the_registry_example_with_an_sse_remote_gets_an_sse_method(app, db, extra_dir):  # noqa: F811
    """`generic-server-json.md`'s "Server with Remote and Package Options": a streamable HTTP remote with an API key
    header and a region header, and an SSE remote without headers (so it signs in with OAuth)."""
    result = run_import(app, str(FIXTURES / "hybrid-remote-and-package.json"))
    assert result.exit_code == 0, (result.output, result.exception)
    path = extra_dir / "hybrid-mcp.json"
    assert result.stdout.splitlines()[0] == (
        "Imported io.modelcontextprotocol.anonymous/hybrid-mcp as 'hybrid-mcp' "
        "(API key (mcp.anonymous.modelcontextprotocol.io), "
        f"Sign in (mcp.anonymous.modelcontextprotocol.io, SSE)): {path}"
    )
    assert json.loads(path.read_text(encoding="utf-8")) == {
        "schemaVersion": 1,
        "slug": "hybrid-mcp",
        "name": "Hybrid",
        "description": "MCP server available as both local package and remote service",
        "categories": ["imported"],
        "branding": {"logoUrl": "/static/img/apps/custom.svg"},
        "docsUrl": "https://github.com/example/hybrid-mcp",
        "methods": [
            {
                "key": "mcp-key",
                "label": "API key (mcp.anonymous.modelcontextprotocol.io)",
                "transport": "mcp_remote",
                "auth": "api_key",
                "grantKinds": ["organization", "user", "agent"],
                "defaults": {"serverUrl": "https://mcp.anonymous.modelcontextprotocol.io/http"},
                "credentialFields": [
                    {
                        "key": "x_api_key",
                        "label": "API key for authentication",
                        "type": "password",
                        "required": True,
                        "secret": True,
                        "placeholder": "X-API-Key value",
                        "helpText": "Sent in the X-API-Key header.",
                    }
                ],
                "tenantFields": [
                    {
                        "key": "x_region",
                        "label": "Service region",
                        "type": "select",
                        "required": False,
                        "secret": False,
                        "placeholder": "us-east-1",
                        "helpText": "Sent to the server in the X-Region header.",
                        "header": "X-Region",
                        "options": [
                            {"value": "us-east-1", "label": "us-east-1"},
                            {"value": "eu-west-1", "label": "eu-west-1"},
                            {"value": "ap-southeast-1", "label": "ap-southeast-1"},
                        ],
                        "defaultValue": "us-east-1",
                    }
                ],
                "keyPlacement": {"location": "header", "name": "X-API-Key", "prefix": ""},
            },
            {
                "key": "sse-oauth",
                "label": "Sign in (mcp.anonymous.modelcontextprotocol.io, SSE)",
                "transport": "sse",
                "auth": "oauth",
                "grantKinds": ["user", "organization"],
                "defaults": {
                    "serverUrl": "https://mcp.anonymous.modelcontextprotocol.io/sse",
                    "dynamicClientRegistration": True,
                },
            },
        ],
    }
    assert [(m.key, m.transport) for m in get_app("hybrid-mcp").methods] == [
        ("mcp-key", "mcp_remote"),
        ("sse-oauth", "sse"),
    ]


def test_an_sse_only_server_is_imported_and_used_behind_the_gateway(
    app,
    db,
    extra_dir,  # noqa: F811
    tmp_path,
    world,  # noqa: F811
    live_server,  # noqa: F811
    sse_notes,
    monkeypatch,
):
    # The remote is on loopback: a definition's URL passes the outbound guard, so the operator allow-lists it.
    monkeypatch.setitem(app.config, "OUTBOUND_ALLOWED_HOSTS", ["127.0.0.1"])
    document = {
        "$schema": SCHEMA_URL,
        "name": "com.example/legacy-notes",
        "title": "Legacy Notes",
        "description": "Notes served over the older HTTP+SSE transport only.",
        "version": "1.0.0",
        "remotes": [
            {
                "type": "sse",
                "url": sse_notes.url,
                "headers": [
                    {
                        "name": "Authorization",
                        "description": "Notes API key",
                        "value": "Bearer {token}",
                        "isSecret": True,
                        "isRequired": True,
                    }
                ],
            }
        ],
    }
    result = run_import(app, write_document(tmp_path, document))
    assert result.exit_code == 0, (result.output, result.exception)
    assert result.stdout.splitlines()[0] == (
        f"Imported com.example/legacy-notes as 'legacy-notes' (API key (SSE)): {extra_dir / 'legacy-notes.json'}"
    )
    [method] = get_app("legacy-notes").methods
    assert (method.key, method.transport, method.defaults.serverUrl) == ("sse-key", "sse", sse_notes.url)
    assert (method.keyPlacement.name, method.keyPlacement.prefix) == ("Authorization", "Bearer ")

    created = connect(world, "legacy-notes", NOTES_KEY)  # setup lists the tools over SSE
    assert sorted(t["name"] for t in created["tools"]) == ["create_note", "get_note", "search_notes"]

    async def scenario(session):
        listed = sorted(
            t.name for t in (await session.list_tools()).tools if t.name.startswith("legacy-notes__")
        )
        found = await session.call_tool("legacy-notes__search_notes", {"query": "release"})
        missing = await session.call_tool("legacy-notes__get_note", {"note_id": "missing"})
        return listed, found, missing

    listed, found, missing = run_agent(live_server, world.token, scenario)
    assert listed == ["legacy-notes__create_note", "legacy-notes__get_note", "legacy-notes__search_notes"]
    assert not found.is_error and text_of(found) == "Release checklist"
    assert missing.is_error and text_of(missing) == "Error executing tool get_note: No note with id missing"
    assert sse_notes.calls == [("search_notes", {"query": "release"}), ("get_note", {"note_id": "missing"})]
    assert [r.details["outcome"] for r in gateway_activity(db)] == ["ok", "tool_error"]
    # Only the SSE transport's two endpoints were used, always with the key.
    assert {(r.method, r.path, r.auth) for r in sse_notes.requests} == {
        ("GET", "/sse", "ok"),
        ("POST", "/messages/", "ok"),
    }
    assert RequestRecord("POST", "/sse", "ok") not in sse_notes.requests
