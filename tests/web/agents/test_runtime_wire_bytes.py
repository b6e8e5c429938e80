"""The runtime door's exact bytes: every answer `/mcp/runtime-tools` and the REST routes give, byte for byte.

The messages are built from the MCP SDK's own types (`mcp_types`) and the REST bodies by their response models; the
seed contract (`connection-intents-api.md`) keeps the bytes an agent written against it sees, so these assert whole
bodies as raw bytes (key order and separators included), with the run's ids put in.
"""

from __future__ import annotations

import json

import pytest

from app.services.runs.tokens import mint_run_token, open_run

URL = "/mcp/runtime-tools"
SEARCH_DESCRIPTION = (
    "Search the known connectable services and report this run's agent-relative access state for each (ready, "
    "needs_user_action, available, unavailable). Call it before connection_request when a task needs an external "
    "service and access is uncertain. An empty query lists everything."
)
REQUEST_DESCRIPTION = (
    "Request access to a known connectable service for this run's agent from the task's responsible user. Returns "
    "ready when the service is already usable; otherwise sends one connection card to the responsible user and "
    "tells you to finish independent work, then end the run and wait."
)
TOOLS_LIST = (
    '{"jsonrpc": "2.0", "id": 3, "result": {"tools": [{"name": "connections_search", "description": "'
    + SEARCH_DESCRIPTION
    + '", "inputSchema": {"type": "object", "properties": {"query": {"type": "string", "maxLength": 200, '
    '"description": "Service name or what you need to do, e.g. \'github issues\'."}}, "additionalProperties": '
    'false}}, {"name": "connection_request", "description": "'
    + REQUEST_DESCRIPTION
    + '", "inputSchema": {"type": "object", "properties": {"service": {"type": "string", "minLength": 1, '
    '"maxLength": 120, "description": "The service identifier returned by connections_search."}, "connectionId": '
    '{"type": "string", "format": "uuid", "description": "An existing connection of the service to ask access to '
    '(from connections_search)."}, "toolNames": {"type": "array", "items": {"type": "string", "minLength": 1, '
    '"maxLength": 160}, "minItems": 1, "maxItems": 20, "uniqueItems": true, "description": "The exact tools you '
    'need; without it, access to all of the connection\'s tools is asked for (at most 500)."}}, "required": '
    '["service"], "additionalProperties": false}}]}}'
)


@pytest.fixture
def token(db, make):
    company = make.company("Wire Co")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Wirer")
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    run = open_run(agent, issue)
    db.session.commit()
    return mint_run_token(run).token


def _post(client, token, body) -> tuple[int, bytes]:
    data = body if isinstance(body, str) else json.dumps(body)
    response = client.post(
        URL, data=data, headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"}
    )
    return response.status_code, response.get_data()


def _rpc(method, id_=1, params=None) -> dict:
    message: dict = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        message["params"] = params
    return message


@pytest.mark.parametrize(
    ("body", "status", "expected"),
    [
        (
            _rpc("initialize", 7, {"protocolVersion": "2025-11-25", "capabilities": {}}),
            200,
            '{"jsonrpc": "2.0", "id": 7, "result": {"protocolVersion": "2025-03-26", "capabilities": {"tools": '
            '{"listChanged": false}}, "serverInfo": {"name": "paperclip-runtime-tools", "version": "1"}}}',
        ),
        (_rpc("ping", "p"), 200, '{"jsonrpc": "2.0", "id": "p", "result": {}}'),
        (_rpc("tools/list", 3), 200, TOOLS_LIST),
        (
            _rpc("tools/call", 4, {"name": "nope"}),
            404,
            '{"jsonrpc": "2.0", "id": 4, "error": {"code": -32601, "message": "Unknown tool: nope"}}',
        ),
        (
            _rpc("tools/call", 5, {}),
            404,
            '{"jsonrpc": "2.0", "id": 5, "error": {"code": -32601, "message": "Unknown tool: missing"}}',
        ),
        (
            _rpc("server/discover", 6),
            404,
            '{"jsonrpc": "2.0", "id": 6, "error": {"code": -32601, "message": "Unknown method: server/discover"}}',
        ),
        (
            _rpc("tools/call", 8, {"name": "connection_request", "arguments": {"service": "nope"}}),
            200,
            '{"jsonrpc": "2.0", "id": 8, "result": {"content": [{"type": "text", "text": "Connection service nope '
            'is not available"}], "isError": true}}',
        ),
        (
            _rpc("tools/call", 9, {"name": "connection_request", "arguments": {}}),
            200,
            '{"jsonrpc": "2.0", "id": 9, "result": {"content": [{"type": "text", "text": "Validation error: '
            'service: Field required"}], "isError": true}}',
        ),
        (
            _rpc("tools/call", 10, {"name": "connections_search", "arguments": "x"}),
            200,
            '{"jsonrpc": "2.0", "id": 10, "result": {"content": [{"type": "text", "text": "Validation error: '
            'arguments: arguments must be an object"}], "isError": true}}',
        ),
        (
            "{not json",
            400,
            '{"jsonrpc": "2.0", "id": null, "error": {"code": -32700, "message": "Parse error"}}',
        ),
        (
            "42",
            400,
            '{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid Request"}}',
        ),
        (
            "[]",
            400,
            '{"jsonrpc": "2.0", "id": null, "error": {"code": -32600, "message": "Invalid Request: empty batch"}}',
        ),
        (
            {"jsonrpc": "2.0", "id": 11, "method": 5},
            400,
            '{"jsonrpc": "2.0", "id": 11, "error": {"code": -32600, "message": "Invalid Request"}}',
        ),
        (
            _rpc("ping", 12, []),
            400,
            '{"jsonrpc": "2.0", "id": 12, "error": {"code": -32602, "message": "Invalid params"}}',
        ),
        (
            [_rpc("ping", 1), {"jsonrpc": "2.0", "method": "notifications/initialized"}, _rpc("x", 2)],
            200,
            '[{"jsonrpc": "2.0", "id": 1, "result": {}}, {"jsonrpc": "2.0", "id": 2, "error": {"code": -32601, '
            '"message": "Unknown method: x"}}]',
        ),
        ({"jsonrpc": "2.0", "method": "notifications/initialized"}, 202, ""),
    ],
    ids=lambda value: None,
)
def test_mcp_answers_are_the_seed_bytes(client, token, body, status, expected):
    assert _post(client, token, body) == (status, expected.encode())


def test_odd_request_ids_are_echoed_as_sent(client, token):
    for id_, echoed in ((1.5, "1.5"), (True, "true"), ({"a": [1]}, '{"a": [1]}'), (None, "null")):
        assert _post(client, token, _rpc("ping", id_)) == (
            200,
            f'{{"jsonrpc": "2.0", "id": {echoed}, "result": {{}}}}'.encode(),
        )


def test_a_tool_result_carries_the_value_as_text_and_structured_content(client, token):
    status, raw = _post(
        client, token, _rpc("tools/call", 2, {"name": "connections_search", "arguments": {"query": "github"}})
    )
    assert status == 200
    value = json.loads(raw)["result"]["structuredContent"]
    text = json.dumps(value)
    expected = {
        "jsonrpc": "2.0",
        "id": 2,
        "result": {"content": [{"type": "text", "text": text}], "structuredContent": value},
    }
    assert raw == json.dumps(expected).encode()
    assert list(value) == ["version", "query", "results"]
    assert list(value["results"][0]) == [
        "service",
        "name",
        "description",
        "logoUrl",
        "methods",
        "source",
        "state",
        "reason",
        "connectionId",
    ]


def test_rest_bodies_are_the_seed_bytes(client, token):
    headers = {"Authorization": f"Bearer {token}"}
    search = client.post("/runtime-tools/connections/search", json={"query": "github"}, headers=headers)
    mcp_value = json.loads(
        _post(
            client,
            token,
            _rpc("tools/call", 2, {"name": "connections_search", "arguments": {"query": "github"}}),
        )[1]
    )["result"]["structuredContent"]
    # The REST door is Flask's JSON (sorted keys, compact); the value is the one the MCP tool returns.
    assert search.status_code == 200
    assert search.get_data() == (json.dumps(mcp_value, sort_keys=True, separators=(",", ":")) + "\n").encode()
    refused = client.post("/runtime-tools/connections/request", json={"service": "nope"}, headers=headers)
    assert (refused.status_code, refused.get_data()) == (
        422,
        b'{"error":"Connection service nope is not available"}\n',
    )
    sent = client.post("/runtime-tools/connections/request", json={"service": "notion"}, headers=headers)
    interaction_id = sent.json["interactionId"]
    assert (sent.status_code, sent.get_data()) == (
        200,
        (
            '{"connectionId":null,"instruction":"A connection card was sent to the responsible user. End this run '
            f'and wait for continuation.","interactionId":"{interaction_id}","service":"notion",'
            '"state":"needs_user_action","version":1}\n'
        ).encode(),
    )
