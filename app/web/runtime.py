"""Agent-facing runtime tools: the `/mcp/runtime-tools` MCP endpoint and its REST equivalents.

Authenticated only by the run-bound runtime-tools bearer token (these paths are CSRF-exempt and never use a session).
The MCP endpoint is stateless Streamable HTTP: JSON responses only, no `Mcp-Session-Id`, no SSE stream (a GET that
asks for one gets 405). Tool failures the agent should read come back as `isError` results; token and run failures
keep their HTTP status so clients stop.
"""

from __future__ import annotations

import json
from typing import Annotated

from flask import Blueprint, Response, jsonify, request
from pydantic import BaseModel, StringConstraints, ValidationError

from app.extensions import db
from app.services import runtime_tools
from app.services.errors import ServiceError, ValidationFailed
from app.services.run_tokens import verify_run_token
from app.web.api.validation import StrictBody, parse_body
from app.web.security import bearer_token

bp = Blueprint("runtime", __name__)


class SearchBody(StrictBody):
    query: Annotated[str, StringConstraints(max_length=runtime_tools.QUERY_MAX_LENGTH)] = ""


class RequestBody(StrictBody):
    service: Annotated[str, StringConstraints(min_length=1, max_length=runtime_tools.SERVICE_MAX_LENGTH)]


def _claims() -> dict:
    return verify_run_token(bearer_token())


def _validate(model: type[BaseModel], data) -> BaseModel:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ValidationFailed(
            [
                {"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]}
                for e in err.errors(include_url=False, include_input=False)
            ]
        ) from None


def run_search(claims: dict, body: SearchBody) -> dict:
    ctx = runtime_tools.load_run_context(claims)
    return runtime_tools.search_connections(ctx, body.query)


def run_request(claims: dict, body: RequestBody) -> dict:
    ctx = runtime_tools.load_run_context(claims)
    result = runtime_tools.request_connection(ctx, body.service)
    db.session.commit()
    return result


# --- REST ----------------------------------------------------------------------------------------------------


@bp.post("/runtime-tools/connections/search")
def rest_search():
    claims = _claims()
    return jsonify(run_search(claims, parse_body(SearchBody)))


@bp.post("/runtime-tools/connections/request")
def rest_request():
    claims = _claims()
    return jsonify(run_request(claims, parse_body(RequestBody)))


# --- MCP -----------------------------------------------------------------------------------------------------

TOOLS = {"connections_search": (SearchBody, run_search), "connection_request": (RequestBody, run_request)}


def _rpc(id_, *, result=None, error=None, status: int = 200) -> Response:
    body: dict = {"jsonrpc": "2.0", "id": id_}
    if error is not None:
        body["error"] = error
    else:
        body["result"] = result
    return Response(json.dumps(body), status=status, mimetype="application/json")


def _tool_result(value: dict) -> dict:
    return {"content": [{"type": "text", "text": json.dumps(value)}], "structuredContent": value}


def _tool_error(message: str) -> dict:
    return {"content": [{"type": "text", "text": message}], "isError": True}


@bp.get("/mcp/runtime-tools")
def mcp_discovery():
    runtime_tools.load_live_run(_claims())
    if "text/event-stream" in request.headers.get("Accept", ""):
        return Response(status=405, headers={"Allow": "POST"})
    return jsonify({"name": runtime_tools.SERVER_NAME, "protocolVersion": runtime_tools.PROTOCOL_VERSION})


@bp.post("/mcp/runtime-tools")
def mcp_rpc():
    claims = _claims()
    runtime_tools.load_live_run(claims)
    try:
        message = json.loads(request.get_data(as_text=True) or "")
    except (ValueError, UnicodeDecodeError):
        return _rpc(None, error={"code": -32700, "message": "Parse error"}, status=400)
    if not isinstance(message, dict):
        return _rpc(None, error={"code": -32600, "message": "Invalid Request"}, status=400)
    id_ = message.get("id")
    method = message.get("method")
    if not isinstance(method, str):
        if "id" not in message or "result" in message or "error" in message:
            return Response(
                status=202
            )  # a response or malformed notification from the client: nothing to say
        return _rpc(id_, error={"code": -32600, "message": "Invalid Request"}, status=400)
    if method.startswith("notifications/") or "id" not in message:
        return Response(status=202)
    params = message.get("params") or {}
    if not isinstance(params, dict):
        return _rpc(id_, error={"code": -32602, "message": "Invalid params"}, status=400)
    if method == "initialize":
        return _rpc(
            id_,
            result={
                "protocolVersion": runtime_tools.PROTOCOL_VERSION,
                "capabilities": {"tools": {"listChanged": False}},
                "serverInfo": {"name": runtime_tools.SERVER_NAME, "version": "1"},
            },
        )
    if method == "ping":
        return _rpc(id_, result={})
    if method == "tools/list":
        return _rpc(id_, result={"tools": runtime_tools.TOOL_DEFINITIONS})
    if method == "tools/call":
        return _call_tool(id_, claims, params)
    return _rpc(id_, error={"code": -32601, "message": f"Unknown method: {method}"}, status=404)


def _call_tool(id_, claims: dict, params: dict) -> Response:
    name = params.get("name")
    if not isinstance(name, str) or name not in TOOLS:
        label = name if isinstance(name, str) and name else "missing"
        return _rpc(id_, error={"code": -32601, "message": f"Unknown tool: {label}"}, status=404)
    model, handler = TOOLS[name]
    arguments = params.get("arguments")
    arguments = {} if arguments is None else arguments
    try:
        if not isinstance(arguments, dict):
            raise ValidationFailed([{"loc": [], "msg": "arguments must be an object", "type": "object_type"}])
        value = handler(claims, _validate(model, arguments))
    except runtime_tools.RunRejected:
        raise
    except ValidationFailed as err:
        db.session.rollback()
        problems = "; ".join(
            f"{'.'.join(str(p) for p in d['loc']) or 'arguments'}: {d['msg']}" for d in err.details
        )
        return _rpc(id_, result=_tool_error(f"Validation error: {problems}"))
    except ServiceError as err:
        db.session.rollback()
        return _rpc(id_, result=_tool_error(err.message))
    return _rpc(id_, result=_tool_result(value))
