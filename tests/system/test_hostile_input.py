"""Hostile bodies at every door (issue 13): nesting deep enough to exhaust the JSON decoder, oversized and streamed
bodies, NUL characters and lone UTF-16 surrogates.

Each is sent where it was found: the MCP doors (`/mcp/runtime-tools`, `/mcp/gateway`), the runtime REST routes, the
board API, the login page and paths no route serves, with and without credentials. The test client re-raises server
errors under TESTING, so a crash fails the test; a streamed body goes through a real server on loopback.
"""

from __future__ import annotations

import io
import json
import logging
from types import SimpleNamespace

import pytest
import requests
from sqlalchemy import func, select

from app.models import ActivityLog, ThreadInteraction
from app.services.accounts import create_api_key
from app.web.json_body import MAX_DEPTH
from tests.conftest import serving, sign_in
from tests.doors import SEARCH_URL, bearer, refusal_fields
from tests.peers.mcp_servers import HONCHO_KEY

RUNTIME_MCP = "/mcp/runtime-tools"
GATEWAY = "/mcp/gateway"
MCP_DOORS = [RUNTIME_MCP, GATEWAY]
RUNTIME_REST = [SEARCH_URL, "/runtime-tools/connections/request"]
DEEP = "[" * 5000  # far past the decoder's recursion limit
PARSEABLE_BUT_DEEP = "[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1)
NUL = "\x00"
SURROGATE = "\ud800"


class UnreadableBody(io.BytesIO):
    """A request body that fails the test if anything reads it."""

    def read(self, *args):
        raise AssertionError("the body was read")

    readline = read
    read1 = read
    readinto = read


def unread_post(client, url, length: int, headers=None):
    """POST declaring `length` bytes of JSON whose stream must never be read."""
    return client.post(
        url,
        input_stream=UnreadableBody(),
        content_type="application/json",
        headers=headers or {},
        environ_overrides={"CONTENT_LENGTH": str(length)},
    )


def raw_post(client, url, text: str, headers=None, content_type="application/json"):
    return client.post(url, data=text.encode("utf-8"), content_type=content_type, headers=headers or {})


def rpc_text(message: dict) -> str:
    return json.dumps(message, ensure_ascii=True)  # lone surrogates travel as \\ud800 escapes, as JSON allows


@pytest.fixture
def world(app, db, make, providers):
    world = make.task_run("Hostile Co")
    _key, world.api_key = create_api_key(world.owner, "hostile")
    db.session.commit()
    return world


@pytest.fixture
def no_errors_logged(caplog):
    """Fails the test when the app logged an error (an unhandled exception logs its traceback)."""
    with caplog.at_level(logging.ERROR):
        yield
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR], caplog.text


def connect_url(world) -> str:
    return f"/api/companies/{world.company.id}/tools/apps/connect"


def _count(db, model) -> int:
    db.session.rollback()
    return db.session.scalar(select(func.count()).select_from(model))


# --- 1. nesting deep enough to exhaust the decoder --------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [*MCP_DOORS, *RUNTIME_REST, "/api/companies/x/tools/apps/connect", "/login", "/nowhere", "/mcp/nowhere"],
)
@pytest.mark.parametrize("body", [DEEP, PARSEABLE_BUT_DEEP], ids=["exhausting", "too-deep"])
def test_deep_json_without_credentials_is_refused_not_a_crash(client, db, no_errors_logged, path, body):
    response = raw_post(client, path, body)
    assert response.status_code in {400, 401, 404}, response.get_data(as_text=True)[:300]


@pytest.mark.parametrize("path", MCP_DOORS)
@pytest.mark.parametrize("content_type", ["application/json", "text/plain"])
@pytest.mark.parametrize("body", [DEEP, PARSEABLE_BUT_DEEP], ids=["exhausting", "too-deep"])
def test_deep_json_on_an_mcp_door_is_a_parse_error(client, world, no_errors_logged, path, content_type, body):
    response = raw_post(client, path, body, bearer(world.token), content_type)
    assert response.status_code == 400
    assert response.json == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "Parse error"},
    }


@pytest.mark.parametrize("path", MCP_DOORS)
def test_deep_arguments_inside_a_call_are_a_parse_error(client, world, no_errors_logged, path):
    nested = "[" * 500 + "]" * 500
    text = (
        '{"jsonrpc": "2.0", "id": 7, "method": "tools/call", '
        f'"params": {{"name": "connections_search", "arguments": {{"query": {nested}}}}}}}'
    )
    response = raw_post(client, path, text, bearer(world.token))
    assert response.status_code == 400 and response.json["error"]["code"] == -32700


@pytest.mark.parametrize("body", [DEEP, PARSEABLE_BUT_DEEP], ids=["exhausting", "too-deep"])
def test_deep_json_on_runtime_rest_and_board_api_is_a_validation_error(client, world, no_errors_logged, body):
    doors = [(url, bearer(world.token)) for url in RUNTIME_REST]
    doors.append((connect_url(world), bearer(world.api_key)))
    for url, headers in doors:
        response = raw_post(client, url, body, headers)
        assert response.status_code == 400, (url, response.json)
        assert response.json["error"] == "Validation error"
        assert response.json["details"][0]["type"] == "json_invalid"


# --- 2. body size, and nothing read before the caller is known ------------------------------------------------

OVER = 2 * 1024 * 1024  # the default limit is 1 MiB


@pytest.mark.parametrize("path", [*MCP_DOORS, *RUNTIME_REST, "/api/companies/x/tools/apps/connect"])
def test_oversized_body_is_413_from_its_content_length_before_anything_reads_it(client, db, path):
    response = unread_post(client, path, OVER)
    assert response.status_code == 413
    message = f"Request body too large (at most {1024 * 1024} bytes)"
    if path.startswith("/mcp/"):
        assert response.json == {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": message}}
    else:
        assert response.json == {"error": message}


@pytest.mark.parametrize("path", ["/login", "/nowhere"])
def test_oversized_body_to_a_page_is_413_without_reading_it(client, db, path):
    response = unread_post(client, path, OVER)
    assert response.status_code == 413 and "Request body too large" in response.get_data(as_text=True)


def test_limit_comes_from_the_environment(monkeypatch):
    from app.config import load_config

    monkeypatch.setenv("SWITCHBOARD_MAX_CONTENT_LENGTH", "4096")
    assert load_config("/tmp/switchboard-unused-instance")["MAX_CONTENT_LENGTH"] == 4096
    monkeypatch.delenv("SWITCHBOARD_MAX_CONTENT_LENGTH")
    assert load_config("/tmp/switchboard-unused-instance")["MAX_CONTENT_LENGTH"] == 1024 * 1024


@pytest.mark.parametrize(
    ("path", "status"),
    [(RUNTIME_MCP, 401), (GATEWAY, 401), (SEARCH_URL, 401), ("/api/companies/x/tools/apps/connect", 401)],
)
def test_token_and_api_doors_refuse_a_missing_credential_without_reading_the_body(client, db, path, status):
    assert unread_post(client, path, 100).status_code == status
    assert unread_post(client, path, 100, bearer("not.a.token")).status_code == status


def test_paths_no_route_serves_never_read_the_body(client, db):
    assert unread_post(client, "/mcp/nowhere", 100, {"Authorization": "Bearer x"}).status_code == 404
    assert unread_post(client, "/runtime-tools/nowhere", 100).status_code == 404


def test_bad_token_wins_over_a_refusable_body(client, world):
    """The caller is judged first: a body the text check would refuse never gets that far without a token."""
    message = rpc_text({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": NUL}})
    for path in MCP_DOORS:
        assert raw_post(client, path, message, bearer("not.a.token")).status_code == 401


@pytest.fixture
def small_limit(app):
    saved = app.config["MAX_CONTENT_LENGTH"]
    app.config["MAX_CONTENT_LENGTH"] = 2000
    yield 2000
    app.config["MAX_CONTENT_LENGTH"] = saved


def test_streamed_body_over_the_limit_is_413_on_a_real_server(app, world, small_limit):
    """A chunked body has no Content-Length: Werkzeug's limit stops reading it once it passes the limit."""

    def chunks():
        yield b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "'
        for _ in range(10):
            yield b"x" * 500
        yield b'"}}'

    with serving(app) as base:
        for path in MCP_DOORS:
            response = requests.post(
                f"{base}{path}",
                data=chunks(),
                headers={**bearer(world.token), "Content-Type": "application/json"},
                timeout=30,
            )
            assert response.status_code == 413, response.text
            assert response.json()["error"]["code"] == -32600
        response = requests.post(
            f"{base}{SEARCH_URL}",
            data=chunks(),
            headers={**bearer(world.token), "Content-Type": "application/json"},
            timeout=30,
        )
        assert response.status_code == 413 and "too large" in response.json()["error"]
        # Under the limit, streamed bodies are read as usual.
        small = requests.post(
            f"{base}{RUNTIME_MCP}",
            data=iter([b'{"jsonrpc": "2.0", "id": 1, ', b'"method": "ping"}']),
            headers={**bearer(world.token), "Content-Type": "application/json"},
            timeout=30,
        )
        assert small.status_code == 200 and small.json()["result"] == {}
        head, tail = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "', b'"}}'
        exact = [head, b"x" * (small_limit - len(head) - len(tail)), tail]
        at_limit = requests.post(
            f"{base}{RUNTIME_MCP}",
            data=iter(exact),
            headers={**bearer(world.token), "Content-Type": "application/json"},
            timeout=30,
        )
        assert at_limit.status_code == 200, at_limit.text


# --- 4. lone surrogates (and NUL) at every JSON door ----------------------------------------------------------


def _assert_rpc_text_refusal(response, id_):
    assert response.status_code == 400, response.get_data(as_text=True)[:300]
    assert response.json["id"] == id_ and response.json["error"]["code"] == -32602
    assert response.json["error"]["message"] in {
        "Text must not contain NUL characters",
        "Text must not contain lone UTF-16 surrogates",
    }


@pytest.mark.parametrize("bad", [SURROGATE, "\udfff", NUL], ids=["high", "low", "nul"])
def test_gateway_refuses_unstorable_tool_names_and_arguments_writing_nothing(client, db, world, bad):
    board = world_board(client, world)
    assert board.connect("honcho").status_code == 201
    before = (_count(db, ActivityLog), _count(db, ThreadInteraction))
    calls = [
        {"name": f"honcho__save{bad}memory", "arguments": {}},
        {"name": "honcho__save_memory", "arguments": {"content": f"likes {bad} tea"}},  # ask-first
        {"name": "honcho__save_memory", "arguments": {f"con{bad}tent": "tea"}},
        {"name": "honcho__save_memory", "arguments": {"content": ["ok", {"deeper": bad}]}},
    ]
    for index, params in enumerate(calls):
        message = {"jsonrpc": "2.0", "id": index, "method": "tools/call", "params": params}
        for content_type in ("application/json", "text/plain"):
            response = raw_post(client, GATEWAY, rpc_text(message), bearer(world.token), content_type)
            _assert_rpc_text_refusal(response, index)
    assert (_count(db, ActivityLog), _count(db, ThreadInteraction)) == before


def test_an_ask_first_call_with_ordinary_unicode_still_makes_its_card(client, db, world):
    board = world_board(client, world)
    assert board.connect("honcho").status_code == 201
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "honcho__save_memory", "arguments": {"content": "🦄 likes tea \u202e"}},
    }
    response = raw_post(client, GATEWAY, rpc_text(message), bearer(world.token))
    assert response.status_code == 200
    assert refusal_fields(response.json["result"])["reasonCode"] == "approval_required"


@pytest.mark.parametrize("bad", [SURROGATE, NUL], ids=["surrogate", "nul"])
def test_runtime_mcp_refuses_unstorable_text(client, world, bad):
    message = {
        "jsonrpc": "2.0",
        "id": "a",
        "method": "tools/call",
        "params": {"name": "connection_request", "arguments": {"service": f"git{bad}hub"}},
    }
    _assert_rpc_text_refusal(raw_post(client, RUNTIME_MCP, rpc_text(message), bearer(world.token)), "a")


@pytest.mark.parametrize("bad", [SURROGATE, NUL], ids=["surrogate", "nul"])
def test_json_doors_refuse_unstorable_text_with_a_validation_error(client, db, world, bad):
    board = world_board(client, world)
    created = board.connect("honcho")
    doors = [
        ("POST", SEARCH_URL, {"query": f"no{bad}tion"}, bearer(world.token)),
        ("POST", "/runtime-tools/connections/request", {"service": bad}, bearer(world.token)),
        ("PATCH", f"/api/tool-connections/{created.json['id']}", {"name": bad}, bearer(world.api_key)),
        ("POST", connect_url(world), {"appSlug": "github", "name": f"x{bad}"}, bearer(world.api_key)),
        ("POST", f"/api/issues/{world.run.issue_id}/comments", {"body": bad}, board.headers),
    ]
    for method, url, body, headers in doors:
        response = client.open(
            url, method=method, data=rpc_text(body), content_type="application/json", headers=headers
        )
        assert response.status_code == 400, (url, response.json)
        assert response.json["error"] == "Validation error"
        (detail,) = response.json["details"]
        assert detail["type"] in {"string_nul", "string_surrogate"} and detail["loc"][0] == "body"


def world_board(client, world):
    csrf = sign_in(client, world.owner)
    headers = {"X-CSRFToken": csrf}

    def connect(slug):
        body = {"appSlug": slug, "identity": "organization", "credentials": {"authorization": HONCHO_KEY}}
        body["methodConfig"] = {"workspaceId": "team"}
        return client.post(connect_url(world), json=body, headers=headers)

    return SimpleNamespace(headers=headers, connect=connect)
