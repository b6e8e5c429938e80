"""The provider MCP client against real MCP servers (official SDK) on loopback: tools, keys, errors, calls."""

from __future__ import annotations

import hashlib
import re
import socket

import pytest
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from app.adapters.providers import errors as provider_errors
from app.adapters.providers import mcp_client
from app.adapters.providers.client import CLIENT
from app.adapters.providers.errors import (
    ProviderAuthRejected,
    ProviderTimeout,
    ProviderToolError,
    ProviderUnavailable,
)
from app.adapters.providers.mcp_client import call_tool, list_tools
from app.adapters.providers.tools import (
    headers_for_key,
    tool_is_write,
    tool_version_hash,
    url_with_query,
)

# The peer fixtures (also loadable as a plugin from the root conftest); a star import keeps ruff's F811 quiet.
from tests.peers.erring_provider import ERROR_CODE as ERRING_CODE
from tests.peers.erring_provider import start_erring_provider
from tests.peers.mcp_servers import HONCHO_KEY, NOTES_KEY, start_notes_server, start_paged_server

NOTES_AUTH = {"Authorization": f"Bearer {NOTES_KEY}"}
HONCHO_AUTH = {"Authorization": f"Bearer {HONCHO_KEY}"}


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# -- listing tools -------------------------------------------------------------------------------------------


def test_list_tools_with_the_right_key_indexes_the_notes_tools(notes_server):
    tools = {tool.name: tool for tool in list_tools(notes_server.url, headers=NOTES_AUTH)}

    assert set(tools) == {"search_notes", "create_note", "get_note"}
    assert {name: tool.is_write for name, tool in tools.items()} == {
        "search_notes": False,  # readOnlyHint true
        "create_note": True,  # readOnlyHint false
        "get_note": False,  # no annotations; "get" is not a write verb
    }
    search = tools["search_notes"]
    assert search.description == "Search notes by title; returns matching titles."
    assert search.input_schema["properties"]["query"]["type"] == "string"
    assert search.version_hash == tool_version_hash(search.name, search.description, search.input_schema)
    assert re.fullmatch(r"[0-9a-f]{64}", search.version_hash)
    assert {request.auth for request in notes_server.requests} == {"ok"}
    assert notes_server.calls == []


def test_version_hashes_are_stable_across_listings(notes_server):
    first = {tool.name: tool.version_hash for tool in list_tools(notes_server.url, headers=NOTES_AUTH)}
    second = {tool.name: tool.version_hash for tool in list_tools(notes_server.url, headers=NOTES_AUTH)}

    assert first == second
    assert len(set(first.values())) == 3


def test_version_hash_is_sha256_of_canonical_json():
    schema = {"type": "object", "properties": {"b": {"type": "string"}, "a": {"type": "integer"}}}
    reordered = {"properties": {"a": {"type": "integer"}, "b": {"type": "string"}}, "type": "object"}

    digest = tool_version_hash("t", "d", schema)

    assert digest == tool_version_hash("t", "d", reordered)
    assert digest != tool_version_hash("t", "d2", schema)
    canonical = (
        b'{"description":"d","inputSchema":{"properties":{"a":{"type":"integer"},"b":{"type":"string"}},'
        b'"type":"object"},"name":"t"}'
    )
    assert digest == hashlib.sha256(canonical).hexdigest()


@pytest.mark.parametrize(
    ("headers", "outcome"),
    [({"Authorization": "Bearer wrong-key-999"}, "wrong"), ({}, "missing"), (None, "missing")],
    ids=["wrong-key", "empty-headers", "no-headers"],
)
def test_a_rejected_key_raises_auth_rejected_without_the_key(notes_server, headers, outcome):
    with pytest.raises(ProviderAuthRejected) as caught:
        list_tools(notes_server.url, headers=headers)

    error = caught.value
    assert error.status_code == 401
    assert error.message == "The provider rejected the credentials (HTTP 401 Unauthorized)."
    assert "wrong-key-999" not in str(error) and "wrong-key-999" not in repr(error)
    assert NOTES_KEY not in error.message
    assert [request.auth for request in notes_server.requests] == [outcome]
    assert notes_server.calls == []


def test_a_403_is_an_auth_rejection_too(mcp_server_factory):
    server = mcp_server_factory(start_notes_server, reject_status=403)

    with pytest.raises(ProviderAuthRejected) as caught:
        list_tools(server.url, headers={"Authorization": "Bearer no-access"})

    assert caught.value.status_code == 403
    assert caught.value.message == "The provider rejected the credentials (HTTP 403 Forbidden)."


@pytest.mark.parametrize("status", [500, 503])
def test_a_provider_outage_raises_unavailable(notes_server, status):
    notes_server.outage_status = status

    with pytest.raises(ProviderUnavailable) as caught:
        call_tool(
            notes_server.url,
            headers=NOTES_AUTH,
            tool_name="create_note",
            arguments={"title": "t", "body": "b"},
        )

    assert caught.value.message.startswith(
        f"Could not reach the provider's MCP server: the server answered HTTP {status}"
    )
    assert notes_server.calls == []


def test_an_unreachable_server_raises_unavailable():
    url = f"http://127.0.0.1:{_closed_port()}/mcp"

    with pytest.raises(ProviderUnavailable) as caught:
        list_tools(url, headers=NOTES_AUTH, timeout=2.0)

    assert caught.value.message == "Could not reach the provider's MCP server: connection refused."
    assert NOTES_KEY not in caught.value.message


def test_a_server_that_never_answers_hits_the_timeout():
    with socket.socket() as silent:  # accepts connections (backlog) but never reads or answers
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/mcp"

        with pytest.raises(ProviderUnavailable) as caught:
            list_tools(url, headers=NOTES_AUTH, timeout=0.5)

    assert caught.value.message == "The provider's MCP server did not answer within 0.5 seconds."
    assert isinstance(caught.value, ProviderTimeout)


def test_a_url_that_is_not_an_mcp_endpoint_raises_unavailable(open_server):
    with pytest.raises(ProviderUnavailable) as caught:
        list_tools(f"{open_server.base_url}/not-mcp")

    assert (
        caught.value.message
        == "Could not reach the provider's MCP server: the server answered HTTP 404 Not Found."
    )


def test_a_non_http_url_is_refused_before_any_connection():
    with pytest.raises(ProviderUnavailable, match="not an http"):
        list_tools("file:///etc/passwd")


def test_the_open_server_needs_no_headers(open_server):
    tools = list_tools(open_server.url)

    assert [(tool.name, tool.is_write) for tool in tools] == [("ping", False)]
    assert call_tool(open_server.url, tool_name="ping", arguments={})["content"] == [
        {"type": "text", "text": "pong"}
    ]
    assert open_server.calls == [("ping", {})]


def test_list_tools_follows_pagination_cursors(mcp_server_factory):
    server = mcp_server_factory(start_paged_server, tool_count=5, page_size=2)

    tools = list_tools(server.url)

    assert [tool.name for tool in tools] == ["tool_0", "tool_1", "tool_2", "tool_3", "tool_4"]
    assert server.calls == [
        ("tools/list", {"cursor": None}),
        ("tools/list", {"cursor": "2"}),
        ("tools/list", {"cursor": "4"}),
    ]


def test_a_tool_added_at_runtime_shows_on_the_next_listing(notes_server):
    before = {tool.name for tool in list_tools(notes_server.url, headers=NOTES_AUTH)}

    def archive_note(note_id: str) -> str:
        return f"archived {note_id}"

    notes_server.add_tool(archive_note, description="Archive a note.", read_only=False, destructive=True)
    after = {tool.name: tool for tool in list_tools(notes_server.url, headers=NOTES_AUTH)}

    assert "archive_note" not in before
    assert set(after) == before | {"archive_note"}
    assert after["archive_note"].is_write is True


def test_a_changed_tool_gets_a_new_version_hash(notes_server):
    before = {tool.name: tool.version_hash for tool in list_tools(notes_server.url, headers=NOTES_AUTH)}

    def get_note(note_id: str, include_body: bool = True) -> dict[str, str]:
        return {"id": note_id}

    notes_server.add_tool(get_note, description="Fetch one note by id.", replace=True)
    after = {tool.name: tool.version_hash for tool in list_tools(notes_server.url, headers=NOTES_AUTH)}

    assert after["get_note"] != before["get_note"]
    assert after["search_notes"] == before["search_notes"]


# -- calling tools -------------------------------------------------------------------------------------------


def test_call_tool_runs_the_tool_once_and_returns_structured_content(notes_server):
    arguments = {"title": "Standup", "body": "Daily at 9."}

    result = call_tool(notes_server.url, headers=NOTES_AUTH, tool_name="create_note", arguments=arguments)

    assert notes_server.calls == [("create_note", arguments)]
    assert result["isError"] is False
    assert result["structuredContent"] == {"id": "n3", "title": "Standup", "body": "Daily at 9."}
    assert result["content"][0]["type"] == "text"
    assert '"title": "Standup"' in result["content"][0]["text"]
    assert [request.method for request in notes_server.requests].count(
        "POST"
    ) == 3  # initialize, initialized, call


def test_call_tool_reports_a_failed_tool_as_is_error(notes_server):
    result = call_tool(
        notes_server.url, headers=NOTES_AUTH, tool_name="get_note", arguments={"note_id": "nope"}
    )

    assert result["isError"] is True
    assert result["structuredContent"] is None
    assert "No note with id nope" in result["content"][0]["text"]
    assert notes_server.calls == [("get_note", {"note_id": "nope"})]


def test_call_tool_with_a_rejected_key_runs_nothing(notes_server):
    with pytest.raises(ProviderAuthRejected):
        call_tool(
            notes_server.url, headers={"Authorization": "Bearer stale"}, tool_name="create_note", arguments={}
        )

    assert notes_server.calls == []


def test_a_protocol_level_failure_raises_tool_error(notes_server):
    def export_notes(fmt: str) -> str:
        raise MCPError(INVALID_PARAMS, f"unsupported format {fmt}")

    notes_server.add_tool(export_notes, description="Export all notes.")

    with pytest.raises(ProviderToolError) as caught:
        call_tool(notes_server.url, headers=NOTES_AUTH, tool_name="export_notes", arguments={"fmt": "xls"})

    assert caught.value.message == (
        "The provider could not run the tool 'export_notes': unsupported format xls (MCP error -32602)"
    )
    assert (caught.value.code, caught.value.said) == (INVALID_PARAMS, "unsupported format xls")


@pytest.fixture
def erring():
    server = start_erring_provider()
    yield server
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
def test_a_providers_json_rpc_error_is_named_with_its_code_and_words(erring, mode, how):
    """Issue 34 item 1: whichever way the provider sends its JSON-RPC error (plain JSON, inside an HTTP 500, on a
    stream that then closes), the error says what the provider said, not that the connection closed."""
    erring.mode = mode
    with pytest.raises(ProviderToolError) as caught:
        call_tool(erring.url, headers=NOTES_AUTH, tool_name="forecast", arguments={"city": "Oslo"}, timeout=5)

    assert caught.value.message == (
        f"The provider could not run the tool 'forecast': Forecast backend is down ({how})"
    )
    assert (caught.value.code, caught.value.said) == (ERRING_CODE, "Forecast backend is down")
    assert erring.calls == [{"name": "forecast", "arguments": {"city": "Oslo"}}]


def test_a_providers_error_words_are_cut_and_never_carry_the_credential(erring):
    erring.mode = "status"
    erring.message = "Token {auth} may not read forecasts. " + "x" * 5000
    with pytest.raises(ProviderToolError) as caught:
        call_tool(erring.url, headers=NOTES_AUTH, tool_name="forecast", arguments={}, timeout=5)

    said = caught.value.said
    assert said == ("Token [redacted] may not read forecasts. " + "x" * 5000)[:499] + "…"
    assert len(said) == provider_errors.PROVIDER_MESSAGE_LIMIT
    assert NOTES_KEY not in caught.value.message and said in caught.value.message


def test_a_provider_that_hangs_up_on_a_call_is_not_called_unreachable(erring):
    erring.mode = "silent"
    with pytest.raises(provider_errors.ProviderError) as caught:
        call_tool(erring.url, headers=NOTES_AUTH, tool_name="forecast", arguments={}, timeout=5)

    assert type(caught.value) is provider_errors.ProviderError
    assert caught.value.message == (
        "The provider closed the call to 'forecast' without answering it (no result and no error); the tool may "
        "have run."
    )


def test_call_tool_on_an_unreachable_server_raises_unavailable():
    with pytest.raises(ProviderUnavailable, match="connection refused"):
        call_tool(f"http://127.0.0.1:{_closed_port()}/mcp", tool_name="ping", arguments={}, timeout=2.0)


# -- the Honcho-like provider ---------------------------------------------------------------------------------


def test_honcho_like_tools_expose_workspace_id(honcho_server):
    tools = {tool.name: tool for tool in list_tools(honcho_server.url, headers=HONCHO_AUTH)}

    for name in ("search_memory", "save_memory"):
        assert "workspace_id" in tools[name].input_schema["properties"]
        assert "workspace_id" in tools[name].input_schema["required"]
    assert "workspace_id" not in tools["list_workspaces"].input_schema.get("properties", {})
    assert {name: tool.is_write for name, tool in tools.items()} == {
        "search_memory": False,
        "save_memory": True,
        "list_workspaces": False,
    }


def test_honcho_like_results_echo_what_the_provider_received(honcho_server):
    arguments = {"workspace_id": "ws-alpha", "query": "deploys"}

    result = call_tool(honcho_server.url, headers=HONCHO_AUTH, tool_name="search_memory", arguments=arguments)

    assert result["structuredContent"]["received"] == arguments
    assert honcho_server.calls == [("search_memory", arguments)]


# -- key placement ---------------------------------------------------------------------------------------------


def test_x_api_key_header_placement_reaches_the_provider(mcp_server_factory):
    server = mcp_server_factory(
        start_notes_server, required_key="xkey-789", key_header="X-Api-Key", key_prefix=""
    )
    headers, params = headers_for_key({"location": "header", "name": "X-Api-Key"}, "xkey-789")

    assert (headers, params) == ({"X-Api-Key": "xkey-789"}, {})
    assert len(list_tools(server.url, headers=headers)) == 3
    with pytest.raises(ProviderAuthRejected):
        list_tools(server.url, headers={"Authorization": "Bearer xkey-789"})


def test_query_placement_builds_the_url_and_reaches_the_provider(mcp_server_factory):
    server = mcp_server_factory(start_notes_server, required_key="qkey-321", key_query="api_key")
    headers, params = headers_for_key({"location": "query", "name": "api_key"}, "qkey-321")

    assert (headers, params) == ({}, {"api_key": "qkey-321"})
    url = url_with_query(server.url, params)
    assert url == f"{server.url}?api_key=qkey-321"
    assert len(list_tools(url, headers=headers)) == 3

    with pytest.raises(ProviderAuthRejected) as caught:
        list_tools(url_with_query(server.url, {"api_key": "qkey-wrong"}))
    assert "qkey-wrong" not in caught.value.message


def test_url_with_query_keeps_other_params_and_replaces_the_same_name():
    assert url_with_query("https://p.example/mcp?team=7&api_key=old", {"api_key": "k y"}) == (
        "https://p.example/mcp?team=7&api_key=k+y"
    )
    assert url_with_query("https://p.example/mcp", {}) == "https://p.example/mcp"


@pytest.mark.parametrize(
    ("placement", "expected"),
    [
        (
            {"location": "header", "name": "Authorization", "prefix": "Bearer"},
            {"Authorization": "Bearer s3cret"},
        ),
        (
            {"location": "header", "name": "Authorization", "prefix": "Bearer "},
            {"Authorization": "Bearer s3cret"},
        ),
        ({"location": "header"}, {"Authorization": "s3cret"}),
        ({"location": "header", "name": "X-Api-Key", "prefix": ""}, {"X-Api-Key": "s3cret"}),
        (
            {"location": "header", "name": "Authorization", "prefix": "Token"},
            {"Authorization": "Token s3cret"},
        ),
    ],
)
def test_headers_for_key(placement, expected):
    assert headers_for_key(placement, "  s3cret\n") == (expected, {})


@pytest.mark.parametrize(
    ("placement", "secret"),
    [
        ({"location": "cookie", "name": "k"}, "s3cret"),
        ({"location": "query"}, "s3cret"),
        ({"location": "header", "name": "Content-Type"}, "s3cret"),
        ({"location": "header", "name": "Bad Header"}, "s3cret"),
        ({"location": "header", "name": "X-Api-Key"}, "   "),
        ({"location": "header", "name": "X-Api-Key"}, "a\r\nInjected: yes"),
    ],
)
def test_headers_for_key_refuses_bad_placements(placement, secret):
    with pytest.raises(ValueError):
        headers_for_key(placement, secret)


# -- is_write --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "annotations", "expected"),
    [
        ("delete_everything", {"readOnlyHint": True}, False),  # the annotation wins over the name
        ("list_things", {"readOnlyHint": False}, True),
        ("list_things", {"destructiveHint": True}, True),
        ("create_thing", {"destructiveHint": False}, True),  # not destructive, but the verb still says write
        ("get_thing", {"destructiveHint": False}, False),
        ("createIssue", None, True),
        ("notes.update_note", None, True),
        ("Send-Email", None, True),
        ("upsert", None, True),
        ("search_notes", None, False),
        ("settings_get", None, False),  # the verb is the first word, not any word
        ("", None, False),
    ],
)
def test_tool_is_write(name, annotations, expected):
    assert tool_is_write(name, annotations) is expected


def test_keys_stay_out_of_the_logs(caplog, mcp_server_factory):
    server = mcp_server_factory(start_notes_server, required_key="qkey-log", key_query="api_key")

    with caplog.at_level("DEBUG"):
        list_tools(url_with_query(server.url, {"api_key": "qkey-log"}))
        with pytest.raises(ProviderAuthRejected):
            list_tools(url_with_query(server.url, {"api_key": "qkey-bad"}), headers={"X-Other": "hdr-secret"})

    assert any("HTTP Request" in record.getMessage() for record in caplog.records)  # httpx2 did log the URLs
    assert any(record.name == mcp_client.__name__ for record in caplog.records)  # and we logged the failure
    for secret in ("qkey-log", "qkey-bad", "hdr-secret"):
        assert secret not in caplog.text


@pytest.mark.parametrize("bad_value", ["sk-live-trailing ", "sk-live-abc\r\nX-Injected: 1"])
def test_a_header_that_is_not_valid_http_gives_a_plain_error(open_server, bad_value):
    with pytest.raises(provider_errors.ProviderError) as caught:
        list_tools(open_server.url, headers={"X-Api-Key": bad_value})

    assert type(caught.value) is provider_errors.ProviderError
    assert "not valid HTTP" in caught.value.message
    assert "sk-live" not in caught.value.message
    assert open_server.requests == []
