"""Agent-facing tool gateway: `/mcp/gateway`, the MCP endpoint through which a run calls its connected tools.

Authenticated by the run-bound runtime-tools token and served by the same stateless transport as
`/mcp/runtime-tools` (see `app.web.jsonrpc`). The handshake and `tools/list` need a live run; `tools/call`
re-validates the whole run context (task, ownership, responsible person) first. Token and run failures keep
their HTTP status; everything the agent should read (a denial, an approval to wait for, a provider failure) is
an isError result. A tools/call commits at three points on purpose: the policy decision (a consumed approval, a
new card) is durable before the provider is contacted, the transaction is closed while the provider works (no
database connection is held during the call), and the call's activity row is written after.
"""

from __future__ import annotations

from flask import Blueprint, Response, jsonify

from app.core.errors import ServiceError
from app.extensions import db
from app.services.gateway import calls as gateway_calls
from app.services.gateway import tools as gateway_tools
from app.services.runtime import context as run_context
from app.web.agents import jsonrpc
from app.web.security import request_run_claims
from app.web.unit_of_work import Reason, commit_point

bp = Blueprint("gateway", __name__)

URL = "/mcp/gateway"


def _claims() -> dict:
    return request_run_claims()


@bp.get(URL)
def discovery():
    run_context.load_live_run(_claims())
    return jsonrpc.sse_probe_refused() or jsonify(
        {"name": gateway_tools.SERVER_NAME, "protocolVersion": jsonrpc.PROTOCOL_VERSION}
    )


@bp.post(URL)
def rpc():
    claims = _claims()
    run, access_revision = run_context.load_live_run_and_revision(claims)
    return jsonrpc.dispatch(
        server_name=gateway_tools.SERVER_NAME,
        list_tools=lambda: gateway_tools.list_tool_definitions(run, access_revision),
        call_tool=lambda id_, params: _call_tool(id_, claims, params),
    )


def _call_tool(id_, claims: dict, params: dict) -> Response:
    name = params.get("name")
    if not isinstance(name, str) or not name:
        return jsonrpc.unknown_tool(id_, name)
    arguments = params.get("arguments")
    arguments = {} if arguments is None else arguments
    if not isinstance(arguments, dict):
        return jsonrpc.rpc(id_, result=jsonrpc.tool_error("Validation error: arguments must be an object"))
    try:
        ctx = run_context.load_run_context(claims)
    except run_context.RunRejected:
        raise
    except ServiceError as err:
        db.session.rollback()
        return jsonrpc.rpc(id_, result=jsonrpc.tool_error(err.message))
    prepared = gateway_calls.prepare_call(ctx, name, arguments)
    commit_point(Reason.GATEWAY_DECISION)
    if prepared.unknown:
        return jsonrpc.unknown_tool(id_, name)
    if prepared.ready:
        target = gateway_calls.prepare_target(prepared)
        commit_point(Reason.PROVIDER_CALL)
        if target is not None:
            prepared.result = gateway_calls.execute_call(prepared, target)
    return jsonrpc.rpc(id_, result=prepared.result)
