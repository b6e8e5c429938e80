"""The stateless MCP-over-HTTP door shared by `/mcp/runtime-tools` and `/mcp/gateway`.

Both endpoints follow the same transport rules (DECISIONS "Runtime MCP endpoint"): JSON responses only, no
`Mcp-Session-Id`, no SSE stream (a GET asking for one gets 405 with `Allow: POST`), a body that is not JSON -> 400
`-32700`, a batch, non-object or non-string `method` -> 400 `-32600`, `params` neither an object nor null -> 400
`-32602`, notifications and messages without a `method` (the client's responses) -> 202 with no body, `ping` -> `{}`,
unknown methods -> 404 `-32601`. The caller authenticates the token and the run first, then hands the parsed message
to `dispatch` with its own `tools/list` and `tools/call` handlers.
"""

from __future__ import annotations

import json
from collections.abc import Callable

from flask import Response, request

from app.web.json_body import EMPTY, BodyNotJson, read_json_body

PROTOCOL_VERSION = "2025-03-26"


def rpc(id_, *, result=None, error=None, status: int = 200) -> Response:
    """One JSON-RPC response (a result, or an error object) as `application/json`."""
    body: dict = {"jsonrpc": "2.0", "id": id_}
    if error is not None:
        body["error"] = error
    else:
        body["result"] = result
    return Response(json.dumps(body), status=status, mimetype="application/json")


def tool_result(value) -> dict:
    """A successful `tools/call` result: the value as JSON text plus `structuredContent`."""
    return {"content": [{"type": "text", "text": json.dumps(value)}], "structuredContent": value}


def tool_error(message: str, structured: dict | None = None) -> dict:
    """A `tools/call` result the agent should read: `isError: true` with the message as text."""
    result: dict = {"content": [{"type": "text", "text": message}], "isError": True}
    if structured is not None:
        result["structuredContent"] = structured
    return result


def unknown_tool(id_, name) -> Response:
    label = name if isinstance(name, str) and name else "missing"
    return rpc(id_, error={"code": -32601, "message": f"Unknown tool: {label}"}, status=404)


def sse_probe_refused() -> Response | None:
    """405 `Allow: POST` for a GET that asks for an SSE stream (call after the token check), else None."""
    if "text/event-stream" in request.headers.get("Accept", ""):
        return Response(status=405, headers={"Allow": "POST"})
    return None


def dispatch(
    *,
    server_name: str,
    list_tools: Callable[[], list[dict]],
    call_tool: Callable[[object, dict], Response],
    protocol_version: str = PROTOCOL_VERSION,
) -> Response:
    """Parse the request body as one JSON-RPC message and answer it.

    `list_tools()` returns the tool definitions; `call_tool(id_, params)` answers a `tools/call` itself.
    """
    try:
        message = read_json_body()
    except BodyNotJson:
        return rpc(None, error={"code": -32700, "message": "Parse error"}, status=400)
    if message is EMPTY:
        return rpc(None, error={"code": -32700, "message": "Parse error"}, status=400)
    if not isinstance(message, dict):
        return rpc(None, error={"code": -32600, "message": "Invalid Request"}, status=400)
    id_ = message.get("id")
    if "method" not in message:
        if "id" not in message or "result" in message or "error" in message:
            return Response(status=202)  # a response (or a bare notification) from the client: nothing to say
        return rpc(id_, error={"code": -32600, "message": "Invalid Request"}, status=400)
    method = message["method"]
    if not isinstance(method, str):
        return rpc(id_, error={"code": -32600, "message": "Invalid Request"}, status=400)
    params = message.get("params")
    params = {} if params is None else params
    if not isinstance(params, dict):
        return rpc(id_, error={"code": -32602, "message": "Invalid params"}, status=400)
    if method.startswith("notifications/") or "id" not in message:
        return Response(status=202)
    if method == "initialize":
        return rpc(
            id_,
            result={
                "protocolVersion": protocol_version,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": server_name, "version": "1"},
            },
        )
    if method == "ping":
        return rpc(id_, result={})
    if method == "tools/list":
        return rpc(id_, result={"tools": list_tools()})
    if method == "tools/call":
        return call_tool(id_, params)
    return rpc(id_, error={"code": -32601, "message": f"Unknown method: {method}"}, status=404)
