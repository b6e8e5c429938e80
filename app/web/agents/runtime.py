"""Agent-facing runtime tools: the `/mcp/runtime-tools` MCP endpoint and its REST equivalents.

Authenticated only by the run-bound runtime-tools bearer token (these paths are CSRF-exempt and never use a session).
The MCP endpoint is stateless Streamable HTTP speaking revision 2025-03-26 only: JSON responses only, no
`Mcp-Session-Id`, no SSE stream (a GET that asks for one gets 405), batches answered with an array. Tool failures the agent should read come back as `isError` results; token and run failures
keep their HTTP status so clients stop.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Annotated, Any, Literal

from flask import Blueprint, Response, has_app_context
from flask.typing import ResponseReturnValue
from mcp_types.jsonrpc import METHOD_NOT_FOUND
from pydantic import AfterValidator, BaseModel, Field, StringConstraints, ValidationError, field_validator
from pydantic.json_schema import JsonDict, JsonValue

from app.catalog.loader import list_apps
from app.core import mcp_versions
from app.core.errors import ServiceError, ValidationFailed
from app.core.mcp_messages import tool_error, tool_result
from app.extensions import db
from app.services.intents import service as intents_service
from app.services.runs import runtime_tools as descriptor
from app.services.runtime import context
from app.services.runtime import request as runtime_tools_request
from app.services.runtime import search as runtime_tools_search
from app.web.agents import jsonrpc
from app.web.api.validation import Omittable, StrictBody, parse_body
from app.web.openapi import operations as openapi
from app.web.openapi.responses import DescribedService, McpDiscoveryResponse, ServiceState, respond
from app.web.openapi.schemas import BLANK_AT_AN_END, exact_text_pattern
from app.web.security import request_run_claims

bp = Blueprint("runtime", __name__)


class SearchBody(StrictBody):
    query: Annotated[str, StringConstraints(max_length=descriptor.QUERY_MAX_LENGTH)] = ""


def _no_blanks_around(value: str) -> str:
    # Names are compared as sent (they must be unique, and the document says `uniqueItems`), so they are not
    # trimmed: blanks around a name are refused rather than trimmed into a duplicate.
    if BLANK_AT_AN_END.search(value):
        raise ValueError("A tool name has no blanks around it")
    return value


def _exact_tool_name(schema: JsonDict) -> None:
    schema.pop("minLength", None)
    schema.pop("maxLength", None)
    schema["pattern"] = exact_text_pattern(1, descriptor.TOOL_NAME_MAX_LENGTH)


ToolName = Annotated[
    str,
    StringConstraints(strip_whitespace=False, min_length=1, max_length=descriptor.TOOL_NAME_MAX_LENGTH),
    AfterValidator(_no_blanks_around),
    Field(json_schema_extra=_exact_tool_name),
]


def _offered_services(schema: JsonDict) -> None:
    """The document lists the catalog's services (those with a connection method): any other name is 422, "not
    available". A configured connection's `connection:<id>` is accepted too but not listed (a company's own ids)."""
    if has_app_context():
        slugs = sorted(
            app.slug for app in list_apps() if app.methods and intents_service.is_catalog_slug(app.slug)
        )
        schema["enum"] = list[JsonValue](slugs)


class RequestBody(StrictBody):
    service: Annotated[str, StringConstraints(min_length=1, max_length=descriptor.SERVICE_MAX_LENGTH)] = (
        Field(
            description="A service from connections_search: a catalog slug, or `connection:<id>` of a configured "
            "connection the run may see",
            json_schema_extra=_offered_services,
        )
    )
    # An access request: an existing connection of the service, and the tools the agent needs (unique).
    connectionId: uuid.UUID | None = Omittable()
    toolNames: (
        Annotated[
            list[ToolName],
            Field(
                min_length=1, max_length=descriptor.TOOL_NAMES_MAX, json_schema_extra={"uniqueItems": True}
            ),
        ]
        | None
    ) = Omittable()

    @field_validator("toolNames")
    @classmethod
    def _unique(cls, value: list[str] | None) -> list[str] | None:
        if value is not None and len(set(value)) != len(value):
            raise ValueError("toolNames must be unique")
        return value


class SearchResultResponse(DescribedService):
    service: str = Field(description="The identifier to pass to connection_request.")
    state: ServiceState
    reason: str
    connectionId: uuid.UUID | None


class SearchResponse(BaseModel):
    version: Literal[1]
    query: str
    results: list[SearchResultResponse] = Field(max_length=20)


class RequestResponse(BaseModel):
    version: Literal[1]
    service: str
    state: Literal["ready", "needs_user_action"]
    connectionId: uuid.UUID | None
    interactionId: uuid.UUID | None
    instruction: str


def _claims() -> dict:
    return request_run_claims()


def _validate(model: type[BaseModel], data: Any) -> BaseModel:
    try:
        return model.model_validate(data)
    except ValidationError as err:
        raise ValidationFailed(
            [
                {"loc": list(e["loc"]), "msg": e["msg"], "type": e["type"]}
                for e in err.errors(include_url=False, include_input=False)
            ]
        ) from None


def run_search(claims: dict, body: SearchBody) -> SearchResponse:
    ctx = context.load_run_context(claims)
    return SearchResponse.model_validate(runtime_tools_search.search_connections(ctx, body.query))


def run_request(claims: dict, body: RequestBody) -> RequestResponse:
    ctx = context.load_run_context(claims)
    return RequestResponse.model_validate(
        runtime_tools_request.request_connection(
            ctx, body.service, connection_id=body.connectionId, tool_names=body.toolNames
        )
    )


# --- REST ----------------------------------------------------------------------------------------------------


@bp.post("/runtime-tools/connections/search")
@openapi.runtime_post(
    "connections_search: connectable services and this run's access state for each",
    SearchBody,
    openapi.Answer("Ranked services (at most 20)", (SearchResponse,)),
)
def rest_search() -> ResponseReturnValue:
    claims = _claims()
    return respond(run_search(claims, parse_body(SearchBody)))


@bp.post("/runtime-tools/connections/request")
@openapi.runtime_post(
    "connection_request: ask the responsible person for access (one card per service)",
    RequestBody,
    openapi.Answer("Ready now, or a card was sent", (RequestResponse,)),
)
def rest_request() -> ResponseReturnValue:
    claims = _claims()
    return respond(run_request(claims, parse_body(RequestBody)))


# --- MCP -----------------------------------------------------------------------------------------------------

TOOLS: dict[str, tuple[type[BaseModel], Callable[[dict, Any], BaseModel]]] = {
    "connections_search": (SearchBody, run_search),
    "connection_request": (RequestBody, run_request),
}


@bp.get("/mcp/runtime-tools")
@openapi.mcp_discovery("Runtime tools MCP endpoint", "runtime")
def mcp_discovery() -> ResponseReturnValue:
    context.load_live_run(_claims())
    return jsonrpc.sse_probe_refused() or respond(
        McpDiscoveryResponse(name=descriptor.SERVER_NAME, protocolVersion=mcp_versions.BASELINE)
    )


@bp.post("/mcp/runtime-tools")
@openapi.mcp_rpc("Runtime tools MCP endpoint", "runtime")
def mcp_rpc() -> ResponseReturnValue:
    claims = _claims()
    context.load_live_run(claims)
    return jsonrpc.serve(
        jsonrpc.Door(
            server_name=descriptor.SERVER_NAME,
            list_tools=lambda: descriptor.TOOL_DEFINITIONS,
            call_tool=lambda id_, params, exchange: _call_tool(id_, claims, params),
            error_status=404,  # the seed contract: unknown tool or method -> HTTP 404 with METHOD_NOT_FOUND
        )
    )


def _call_tool(id_: Any, claims: dict, params: dict) -> Response:
    name = params.get("name")
    if not isinstance(name, str) or name not in TOOLS:
        return jsonrpc.respond(jsonrpc.unknown_tool(id_, name, METHOD_NOT_FOUND))
    model, handler = TOOLS[name]
    arguments = params.get("arguments")
    arguments = {} if arguments is None else arguments
    try:
        if not isinstance(arguments, dict):
            raise ValidationFailed([{"loc": [], "msg": "arguments must be an object", "type": "object_type"}])
        value = handler(claims, _validate(model, arguments))
    except context.RunRejected:
        raise
    except ValidationFailed as err:
        db.session.rollback()
        problems = "; ".join(
            f"{'.'.join(str(p) for p in d['loc']) or 'arguments'}: {d['msg']}" for d in err.details
        )
        return jsonrpc.rpc(id_, result=tool_error(f"Validation error: {problems}"))
    except ServiceError as err:
        db.session.rollback()
        return jsonrpc.rpc(id_, result=tool_error(err.message))
    return jsonrpc.rpc(id_, result=tool_result(value.model_dump(mode="json", exclude_unset=True)))
