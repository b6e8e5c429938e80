"""Agent-facing tool gateway: `/mcp/gateway`, the MCP endpoint through which a run calls its connected tools.

Authenticated by the run-bound runtime-tools token and served by the stateless transport shared with
`/mcp/runtime-tools` (`app.web.agents.jsonrpc`), negotiating the protocol revision per request
(`app.web.agents.negotiation`). The handshake and `tools/list` need a live run; `tools/call` re-validates the whole
run context (task, ownership, responsible person) first. Token and run failures keep their HTTP status; an unknown
tool is JSON-RPC `-32602` at HTTP 200; everything the agent should read (a denial, an approval to wait for, a
provider failure) is an isError result. A tools/call that reaches the provider commits twice on purpose: the
transaction is closed before the provider is contacted (a consumed approval is durable by then, and no database
connection is held during the call), and the call's activity row is written after, in the request's unit of
work. A refused call (unknown, blocked, waiting for approval) commits once, at the end; a used-up approval is
committed before the provider is prepared (an OAuth refresh commits on a connection of its own).

Progress and cancellation (`app.web.agents.streaming`): a call whose `_meta.progressToken` is set by a client that
accepts `text/event-stream` is answered on an SSE stream carrying the provider's progress, then the result; a
closed stream, or `notifications/cancelled` naming the call's request id, cancels the provider call, which sends the
provider `notifications/cancelled`. A cancellation that lands in another server process reaches the call through the
database (`services/gateway/cancellation`).

Resources (`services/gateway/resources`): `resource_link` URIs in tool results are namespaced per connection and
tagged for the agent; `resources/read` of such a URI reads it at the provider with the tool call's access checks,
anything else is "Resource not found" (`-32002`; `-32602` on 2026-07-28). The gateway declares `resources: {}` and
lists no resources.

Change notifications (`app.web.agents.listen`): a 2026-07-28 `subscriptions/listen` is answered with a stream that
says when the run's tool list changes (an access change), and ends with the run.

URL-mode elicitation (`app.web.agents.elicitation`): a call to a connection that needs the responsible person, from a
client that declared `elicitation.url`, opens the connection card and answers with the card's page as a URL
elicitation. What a 2025-x client declared at `initialize` is its own: a client that declared elicitation gets an
`Mcp-Session-Id` carrying it (`app.web.agents.sessions`), so clients sharing a run token are each served by their own
capabilities.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from flask import Blueprint, Response
from flask.typing import ResponseReturnValue
from mcp_types.jsonrpc import INVALID_PARAMS, INVALID_REQUEST

from app.adapters.providers import call_control
from app.core import mcp_messages, mcp_versions
from app.core.errors import ServiceError
from app.core.mcp_messages import tool_error
from app.core.raw_json import RawJSON
from app.extensions import db
from app.models import HeartbeatRun, ToolConnection
from app.services.gateway import calls as gateway_calls
from app.services.gateway import cancellation, meta_tools
from app.services.gateway import elicitation as gateway_elicitation
from app.services.gateway import resources as gateway_resources
from app.services.gateway import timeline as gateway_timeline
from app.services.gateway import tools as gateway_tools
from app.services.gateway.names import tool_name_budget
from app.services.gateway.results import for_the_tool
from app.services.runtime import context as run_context
from app.web.agents import elicitation, jsonrpc, listen, sessions, streaming
from app.web.openapi import operations as openapi
from app.web.openapi.responses import McpDiscoveryResponse, respond
from app.web.security import request_run_claims
from app.web.unit_of_work import Reason, commit_point

bp = Blueprint("gateway", __name__)

URL = "/mcp/gateway"


def _claims() -> dict:
    return request_run_claims()


@bp.get(URL)
@openapi.mcp_discovery("Tool gateway MCP endpoint", "gateway", gateway=True)
def discovery() -> ResponseReturnValue:
    run_context.load_live_run(_claims())
    return jsonrpc.sse_probe_refused() or respond(
        McpDiscoveryResponse(name=gateway_tools.SERVER_NAME, protocolVersion=mcp_versions.BASELINE)
    )


@bp.post(URL)
@openapi.mcp_rpc("Tool gateway MCP endpoint", "gateway", gateway=True)
def rpc() -> ResponseReturnValue:
    claims = _claims()
    unknown_session = sessions.check(claims["run_id"])
    if unknown_session is not None:
        return jsonrpc.respond(unknown_session)
    loaded: list[tuple[HeartbeatRun, int, str | None]] = []

    def live_run() -> tuple[HeartbeatRun, int, str | None]:
        """The token's live run, its company's access revision and its agent's adapter type, loaded once (raises
        `RunRejected`)."""
        if not loaded:
            loaded.append(run_context.load_live_run_and_revision(claims))
        return loaded[0]

    def list_tools() -> RawJSON:
        run = live_run()[0]
        listing, index = _agent_listing(live_run)
        listed: RawJSON = listing
        if meta_tools.exceeds_threshold(listing, index):
            listed = meta_tools.with_pinned(listing.pinned)
        gateway_timeline.record_listed(run, listed)  # the run's decision timeline: "listed"
        return listed

    return jsonrpc.serve(
        jsonrpc.Door(
            server_name=gateway_tools.SERVER_NAME,
            list_tools=list_tools,
            call_tool=lambda id_, params, exchange: _call_tool(id_, claims, params, exchange, live_run),
            negotiates=True,
            on_cancelled=lambda request_id: cancellation.request_cancel(live_run()[0].id, request_id),
            authorize=live_run,
            read_resource=lambda id_, params, exchange: _read_resource(id_, claims, params, exchange),
            on_initialize=lambda params: sessions.opened(
                live_run()[0].id, gateway_elicitation.declared_modes(params.get("capabilities"))
            ),
            listen=lambda id_, params: listen.listen(id_, params, claims, live_run),
        )
    )


LiveRun = Callable[[], tuple[HeartbeatRun, int, str | None]]


def _agent_listing(
    live_run: LiveRun,
) -> tuple[gateway_tools.Listing, Callable[[], meta_tools.ToolIndex]]:
    """The run's own tool listing (read-only filtered when so connected) and its search index (built when asked)."""
    run, revision, adapter_type = live_run()
    budget = tool_name_budget(adapter_type)
    read_only = run_context.is_read_only(run.context_snapshot)
    listing = gateway_tools.list_tool_definitions(run, revision, budget)
    if read_only:
        listing = gateway_tools.only_reading(listing, run, budget)
    key = (run.company_id, run.agent_id, run.responsible_user_id, budget, read_only)
    return listing, lambda: meta_tools.index_of(key, revision, listing)


def _meta_call(
    id_: Any, claims: dict, params: dict, exchange: jsonrpc.Exchange, live_run: LiveRun
) -> jsonrpc.Reply | Response:
    """A call of a meta tool (`services/gateway/meta_tools`). `call_tool` hands its inner name and arguments to
    `_call_tool`, the path of a direct call, so every check applies to the underlying tool."""
    name = params["name"]
    arguments = params.get("arguments")
    arguments = {} if arguments is None else arguments
    if not isinstance(arguments, dict):
        live_run()
        return jsonrpc.message(id_, result=tool_error("Validation error: arguments must be an object")), 200
    if name == meta_tools.CALL:
        inner = arguments.get("name")
        if not isinstance(inner, str) or not inner or inner in meta_tools.NAMES:
            live_run()
            return jsonrpc.message(id_, result=tool_error(META_NAME_ERROR)), 200
        return _call_tool(
            id_,
            claims,
            {**params, "name": inner, "arguments": arguments.get("arguments")},
            exchange,
            live_run,
        )
    _, index = _agent_listing(live_run)
    if name == meta_tools.SEARCH:
        query, limit = arguments.get("query"), arguments.get("limit", meta_tools.SEARCH_LIMIT)
        if not isinstance(query, str) or not query.strip():
            return jsonrpc.message(
                id_, result=tool_error("Validation error: query must be a non-empty string")
            ), 200
        if (
            not isinstance(limit, int)
            or isinstance(limit, bool)
            or not 1 <= limit <= meta_tools.SEARCH_MAX_LIMIT
        ):
            message = f"Validation error: limit must be an integer from 1 to {meta_tools.SEARCH_MAX_LIMIT}"
            return jsonrpc.message(id_, result=tool_error(message)), 200
        text = meta_tools.search_text(index(), query, limit)
    else:
        described = arguments.get("name")
        entry = meta_tools.describe(index(), described) if isinstance(described, str) else None
        if entry is None:
            return jsonrpc.message(id_, result=tool_error(META_NAME_ERROR)), 200
        text = entry
    return jsonrpc.message(id_, result={"content": [{"type": "text", "text": text}]}), 200


META_NAME_ERROR = "Validation error: name must be the name of one of your tools, as search_tools gives it"


def _load_context(claims: dict) -> run_context.RunContext | ServiceError:
    """The run's whole context, re-validated; a token or run failure raises (401/403), any other refusal (a closed
    task, the person left) is returned for the agent to read."""
    try:
        return run_context.load_run_context(claims)
    except run_context.RunRejected:
        raise
    except ServiceError as err:
        db.session.rollback()
        return err


def _call_tool(
    id_: Any, claims: dict, params: dict, exchange: jsonrpc.Exchange, live_run: LiveRun
) -> jsonrpc.Reply | Response:
    """One `tools/call`. `load_run_context` checks the whole run context (the live run first); a malformed call is
    refused only after `live_run` has checked the run, as every other message is."""
    name = params.get("name")
    if not isinstance(name, str) or not name:
        live_run()
        return jsonrpc.unknown_tool(id_, name, INVALID_PARAMS)
    if name in meta_tools.NAMES:
        return _meta_call(id_, claims, params, exchange, live_run)
    arguments = params.get("arguments")
    arguments = {} if arguments is None else arguments
    if not isinstance(arguments, dict):
        live_run()
        return jsonrpc.message(id_, result=tool_error("Validation error: arguments must be an object")), 200
    ctx = _load_context(claims)
    if isinstance(ctx, ServiceError):
        return jsonrpc.message(id_, result=tool_error(ctx.message)), 200
    run_id = ctx.run.id
    prepared = gateway_calls.prepare_call(ctx, name, arguments)
    if prepared.unknown:
        # A tool of a connection that needs the responsible person is not listed, so it arrives as unknown.
        takes_url = elicitation.takes_url(exchange, params)
        needing = (
            gateway_elicitation.connection_needing_person(
                ctx.run, name, tool_name_budget(ctx.agent.adapter_type)
            )
            if takes_url or exchange.modern
            else None
        )
        if needing and not takes_url:
            # 2026-07-28: the call needs a capability the client did not declare: say so (-32021), not "unknown".
            return elicitation.url_mode_required(id_, needing)
        elicited = needing and elicitation.person_needed(id_, ctx, needing, exchange, params)
        return elicited or jsonrpc.unknown_tool(id_, name, INVALID_PARAMS)
    if prepared.ready:
        if prepared.consumed_approval:
            commit_point(Reason.GATEWAY_DECISION)
        target = gateway_calls.prepare_target(prepared)
        commit_point(Reason.PROVIDER_CALL)
        if prepared.needs_person and prepared.connection_id is not None:
            connection = db.session.get(ToolConnection, prepared.connection_id)
            elicited = connection and elicitation.person_needed(id_, ctx, connection, exchange, params)
            if elicited:
                return elicited
        if target is not None:
            token = streaming.progress_token(params)
            # A stream relays progress; on 2026-07-28 it also lets a disconnect be seen (and cancel the call).
            if exchange.streams and not exchange.batched and (token is not None or exchange.modern):
                return streaming.streamed_call(id_, token, run_id, prepared, target, exchange)
            control = cancellation.control_for(run_id, id_)
            with call_control.in_flight(run_id, id_, control):
                prepared.result = gateway_calls.execute_call(prepared, target, control=control)
    # Every path above leaves a result: a refusal, the approval to wait for, or the provider's answer.
    assert prepared.result is not None
    approval = elicitation.approval_needed(id_, ctx, prepared, exchange, params)
    if approval:
        return approval
    return jsonrpc.message(id_, result=for_the_tool(prepared.result, prepared.has_output_schema)), 200


def _read_resource(id_: Any, claims: dict, params: dict, exchange: jsonrpc.Exchange) -> jsonrpc.Reply:
    """`resources/read` of a link a tool handed the agent (`services/gateway/resources`); errors at HTTP 200."""
    uri = params.get("uri")
    if not isinstance(uri, str) or not uri:
        return mcp_messages.error(id_, INVALID_PARAMS, "Invalid params: uri must be a string"), 200
    # 2026-07-28 says -32602 for a resource that does not exist; the earlier revisions -32002.
    not_found = INVALID_PARAMS if exchange.modern else jsonrpc.RESOURCE_NOT_FOUND
    ctx = _load_context(claims)
    if isinstance(ctx, ServiceError):
        return mcp_messages.error(id_, INVALID_REQUEST, ctx.message), 200
    try:
        prepared = gateway_resources.prepare_read(ctx, uri)
        commit_point(Reason.PROVIDER_CALL)
        result = gateway_resources.execute_read(prepared)
    except gateway_resources.ResourceNotFound:
        return mcp_messages.error(id_, not_found, gateway_resources.NOT_FOUND, {"uri": uri}), 200
    except gateway_resources.ResourceReadFailed as failed:
        code = not_found if failed.code in (jsonrpc.RESOURCE_NOT_FOUND,) else failed.code
        return mcp_messages.error(id_, code, failed.message, {"uri": uri}), 200
    if exchange.modern:
        result = {**result, **jsonrpc.NOT_CACHED}
    return jsonrpc.message(id_, result=result), 200
