"""The stateless MCP-over-HTTP transport shared by `/mcp/runtime-tools` and `/mcp/gateway`.

Both doors follow the same transport rules: no `Mcp-Session-Id`, a GET asking for an SSE stream gets 405 with
`Allow: POST`, a body that is not JSON -> 400 `-32700`, a non-object message or a non-string `method` -> 400
`-32600`, `params` neither an object nor null -> 400 `-32602`, notifications and the client's responses -> 202 with
no body, `ping` -> `{}`. Where they differ, a `Door` says how:

- the runtime door speaks the seed contract's revision (2025-03-26) whatever the client asks, and answers an unknown
  method or tool with HTTP 404 and `-32601` (`connection-intents-api.md`);
- the gateway negotiates (`app.web.agents.negotiation`: the `initialize` answer, the `MCP-Protocol-Version` header,
  2026-07-28's per-request `_meta` and `Mcp-*` headers) and answers request errors with HTTP 200 (clients read a
  404 as "session ended"), except where 2026-07-28 prescribes a status (404 for an unknown method).

Batches (a JSON array) are answered with an array of responses on revisions that have them (2025-03-26: the runtime
door always, the gateway when that is the request's revision; notifications inside get no entry, an all-notification
batch gets 202), and refused with 400 `-32600` otherwise. An empty array is 400 `-32600`.

The caller authenticates the token, then calls `serve` with its door; `Door.authorize` checks the run before
anything is answered, except a body that is one `tools/call`, whose handler validates the whole run context itself
(one load instead of two).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import mcp_types
from flask import Response, request
from mcp_types.jsonrpc import INVALID_PARAMS, INVALID_REQUEST, METHOD_NOT_FOUND, PARSE_ERROR

from app.core import mcp_messages, mcp_versions, tracing
from app.core.raw_json import RawJSON, dumps
from app.web.agents import negotiation
from app.web.agents.exchange import Exchange, Reply
from app.web.json_body import EMPTY, BodyNotJson, read_json_body

RESOURCE_NOT_FOUND = (
    -32002
)  # 2025-03-26 .. 2025-11-25 "Error Handling" of resources (mcp_types has no constant)
NOT_CACHED = {"ttlMs": 0, "cacheScope": "private"}
EMPTY_RESOURCE_LISTINGS = {"resources/list": "resources", "resources/templates/list": "resourceTemplates"}


@dataclass(frozen=True)
class Door:
    """One MCP endpoint's tools and the rules where the doors differ (see the module docstring)."""

    server_name: str
    list_tools: Callable[[], list[dict] | RawJSON]  # RawJSON: a listing kept serialized
    # Answers a `tools/call` (id, params, exchange): a Reply, or a Response of its own (an SSE stream).
    call_tool: Callable[[Any, dict, Exchange], Reply | Response]
    negotiates: bool = False
    error_status: int = 200
    on_cancelled: Callable[[Any], object] | None = None  # what it returns is ignored
    # Checks the caller (raising its refusal) before anything is answered. A body that is one `tools/call` request
    # is answered by `call_tool`, which checks the caller itself (and calls this before refusing the message).
    authorize: Callable[[], object] | None = None
    # Answers a `resources/read` (id, params, exchange); a door that has it declares the `resources` capability.
    read_resource: Callable[[Any, dict, Exchange], Reply] | None = None
    # Told the params of every `initialize` (what the client declared); the headers it returns go on the answer.
    on_initialize: Callable[[dict], dict[str, str]] | None = None
    # Answers a 2026-07-28 `subscriptions/listen` (id, params): its stream, or the error that refuses it. A door
    # that has it says `tools.listChanged` on that revision (the earlier ones have no stream to send it on).
    listen: Callable[[Any, dict], Reply | Response] | None = None

    @property
    def capabilities(self) -> mcp_types.ServerCapabilities:
        capabilities = mcp_messages.tools_capabilities()
        if self.read_resource is not None:
            capabilities.resources = mcp_types.ResourcesCapability()
        return capabilities

    def capabilities_on(self, exchange: Exchange) -> mcp_types.ServerCapabilities:
        capabilities = self.capabilities
        if exchange.modern and self.listen is not None and capabilities.tools is not None:
            capabilities.tools.list_changed = True
        return capabilities


def is_one_tool_call(body: object) -> bool:
    """The body is a single `tools/call` request (not a batch, not a notification)."""
    return isinstance(body, dict) and body.get("method") == "tools/call" and "id" in body


def message(id_: Any, *, result: dict) -> dict:
    """One JSON-RPC response body carrying `result`."""
    return mcp_messages.response(id_, result)


def rpc(id_: Any, *, result: dict, status: int = 200) -> Response:
    """One JSON-RPC result as `application/json`."""
    return respond((message(id_, result=result), status))


def respond(reply: Reply | Response) -> Response:
    if isinstance(reply, Response):
        return reply
    body, status = reply
    if body is None:
        return Response(status=status)
    return Response(dumps(body), status=status, mimetype="application/json")


def unknown_tool(id_: Any, name: object, code: int) -> Reply:
    """An unknown (or missing) tool name: `code` is `-32601` on the runtime door (the seed contract, with HTTP 404)
    and `-32602` on the gateway (2025-06-18 "Error Handling")."""
    label = name if isinstance(name, str) and name else "missing"
    return mcp_messages.error(id_, code, f"Unknown tool: {label}"), 404 if code == METHOD_NOT_FOUND else 200


def sse_probe_refused() -> Response | None:
    """405 `Allow: POST` for a GET that asks for an SSE stream (call after the token check), else None."""
    if "text/event-stream" in request.headers.get("Accept", ""):
        return Response(status=405, headers={"Allow": "POST"})
    return None


def accepts_sse() -> bool:
    return "text/event-stream" in request.headers.get("Accept", "")


def serve(door: Door) -> Response:
    """Read the body (one message or a batch) and answer it for `door`."""
    try:
        body = read_json_body()
    except BodyNotJson:
        body = EMPTY
    self_checked = door.authorize is not None and is_one_tool_call(body)
    if door.authorize is not None and not self_checked:
        door.authorize()
    if body is EMPTY:
        return respond((mcp_messages.error(None, PARSE_ERROR, "Parse error"), 400))
    if door.negotiates:
        chosen = negotiation.choose(body, request.headers)
        if not isinstance(chosen, Exchange):
            if self_checked and door.authorize is not None:
                door.authorize()
            return respond(chosen)
        exchange = chosen
    else:
        exchange = Exchange(version=mcp_versions.BASELINE)
    if isinstance(body, list):
        return respond(_batch(door, exchange, body))
    return respond(answer(door, replace(exchange, streams=accepts_sse()), body))


def _batch(door: Door, exchange: Exchange, batch: list) -> Reply:
    if not batch:
        return mcp_messages.error(None, INVALID_REQUEST, "Invalid Request: empty batch"), 400
    if exchange.modern or exchange.version not in mcp_versions.WITH_BATCHES:
        return mcp_messages.error(
            None, INVALID_REQUEST, f"Invalid Request: protocol revision {exchange.version} has no batches"
        ), 400
    inner = replace(exchange, batched=True)
    answers = []
    for item in batch:
        reply = answer(door, inner, item)
        body = reply[0] if not isinstance(reply, Response) else json.loads(reply.get_data())
        if body is not None:
            answers.append(body)
    return (answers or None), (200 if answers else 202)


def answer(door: Door, exchange: Exchange, msg: object) -> Reply | Response:
    """Answer one JSON-RPC message."""
    if not isinstance(msg, dict):
        return mcp_messages.error(None, INVALID_REQUEST, "Invalid Request"), 400
    id_ = msg.get("id")
    if "method" not in msg:
        if "id" not in msg or "result" in msg or "error" in msg:
            return None, 202  # a response (or a bare notification) from the client: nothing to say
        return mcp_messages.error(id_, INVALID_REQUEST, "Invalid Request"), 400
    method = msg["method"]
    if not isinstance(method, str):
        return mcp_messages.error(id_, INVALID_REQUEST, "Invalid Request"), 400
    params = msg.get("params")
    params = {} if params is None else params
    if not isinstance(params, dict):
        return mcp_messages.error(id_, INVALID_PARAMS, "Invalid params"), 400
    if method.startswith("notifications/") or "id" not in msg:
        if method == "notifications/cancelled" and door.on_cancelled is not None:
            door.on_cancelled(params.get("requestId"))
        return None, 202
    with tracing.mcp_request_span(method, id_, params, exchange.version, request.headers) as span:
        reply = _answer_request(door, exchange, id_, method, params)
        if span.is_recording():
            tracing.record_reply(span, _body_of(reply))
        return reply


def _body_of(reply: Reply | Response) -> object:
    """The JSON-RPC message of an answer (None for a stream, whose result comes later)."""
    if not isinstance(reply, Response):
        return reply[0]
    return None if reply.is_streamed else reply.get_json(silent=True)


def _answer_request(door: Door, exchange: Exchange, id_: Any, method: str, params: dict) -> Reply | Response:
    """Answer one JSON-RPC request (it has an id and a method)."""
    if method == "tools/list" and params.get("cursor") is not None:
        # No listing is paginated, so no cursor was ever issued: any cursor is invalid (MCP "Pagination"). The gateway
        # answers request errors at 200; the runtime door keeps 404 for unknown names only, so 400 here.
        return mcp_messages.error(
            id_, INVALID_PARAMS, "Invalid cursor"
        ), 200 if door.error_status == 200 else 400
    if method == "tools/call":
        reply = door.call_tool(id_, params, exchange)
        return _modern_result(door, exchange, reply)
    if method == "resources/read" and door.read_resource is not None:
        return _modern_result(door, exchange, door.read_resource(id_, params, exchange))
    if method == "subscriptions/listen" and exchange.modern and door.listen is not None:
        return door.listen(id_, params)
    result = _result_of(door, exchange, method, params)
    if result is None:
        # 2026-07-28 prescribes 404 for an unknown method; legacy gateway clients read a 404 as "session ended".
        status = 404 if exchange.modern else door.error_status
        return mcp_messages.error(id_, METHOD_NOT_FOUND, f"Unknown method: {method}"), status
    if method == "initialize" and not exchange.modern and door.on_initialize is not None:
        headers = door.on_initialize(params)
        if headers:  # e.g. the gateway's `Mcp-Session-Id` (`app.web.agents.sessions`)
            return Response(
                dumps(message(id_, result=result)), status=200, mimetype="application/json", headers=headers
            )
    return _modern_result(door, exchange, (message(id_, result=result), 200))


def _result_of(door: Door, exchange: Exchange, method: str, params: dict) -> dict | None:
    """The result of a method this transport answers itself, or None for an unknown method."""
    if method == "ping":
        return mcp_messages.dump(mcp_types.EmptyResult())
    if method == "tools/list":
        tools = door.list_tools()
        # A listing kept serialized (RawJSON) was built from `mcp_messages.tool` entries: `dumps` splices it in.
        listing = (
            {"tools": tools}
            if isinstance(tools, RawJSON)
            else mcp_messages.dump(mcp_types.ListToolsResult.model_validate({"tools": tools}))
        )
        if not exchange.modern:
            return listing
        # 2026-07-28 caching: a run's listing is its own and changes with access, so nobody should keep it.
        return {**listing, **NOT_CACHED}
    if door.read_resource is not None and method in EMPTY_RESOURCE_LISTINGS:
        # Resources are read from the links tools hand out; there is nothing to list or template.
        resources: dict[str, list] = {EMPTY_RESOURCE_LISTINGS[method]: []}
        return {**resources, **NOT_CACHED} if exchange.modern else resources
    if exchange.modern:
        if method == "server/discover":
            return mcp_messages.dump(
                mcp_types.DiscoverResult(
                    supported_versions=[*reversed(mcp_versions.SUPPORTED)],
                    capabilities=door.capabilities_on(exchange),
                    ttl_ms=0,
                    cache_scope="private",
                )
            )
        return None
    if method == "initialize":
        version = (
            mcp_versions.negotiate(params.get("protocolVersion")) if door.negotiates else exchange.version
        )
        return mcp_messages.dump(
            mcp_types.InitializeResult(
                protocol_version=version,
                capabilities=door.capabilities,
                server_info=mcp_messages.server_info(door.server_name),
            )
        )
    return None


def _modern_result(door: Door, exchange: Exchange, reply: Reply | Response) -> Reply | Response:
    """On 2026-07-28, a result says `resultType: complete` and names the server in its `_meta`."""
    if not exchange.modern or isinstance(reply, Response):
        return reply
    body, status = reply
    if isinstance(body, dict) and isinstance(body.get("result"), dict):
        body["result"] = modern_result(door.server_name, body["result"])
    return body, status


def modern_result(server_name: str, result: dict) -> dict:
    """A result as 2026-07-28 sends it: `resultType: complete`, and the server named in `_meta` (results the
    gateway passes through from a provider stay dicts: their content blocks are the provider's, not re-parsed)."""
    meta = dict(result.get("_meta") or {})
    meta.setdefault(mcp_versions.META_SERVER_INFO, mcp_messages.dump(mcp_messages.server_info(server_name)))
    return {"resultType": "complete", **result, "_meta": meta}
