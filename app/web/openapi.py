"""`GET /api/openapi.json`: an OpenAPI 3.1 description of every JSON route, built from the models that validate them.

`OPERATIONS` is the registry: one entry per (Flask endpoint, method) with its path, summary, security, the request
body model imported from the route module (the very class `parse_body` validates with, so the document cannot say
one thing while the route checks another), and the response schemas. `tests/test_openapi.py` fails when a JSON route
in `app.url_map` (under `/api/`, `/runtime-tools/`, `/mcp/`) has no entry here, or an entry names no route.

The response models below describe what the views return; they are documentation and the basis of the schemathesis
conformance checks, never used to build responses.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from flask import Blueprint, Flask, current_app, jsonify
from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import models_json_schema

from app.web.agents.runtime import RequestBody, SearchBody
from app.web.api.connections import ConnectBody, FinishBody, PatchBody
from app.web.api.intents import CompleteBody, DeclineBody, PhaseBody
from app.web.api.tasks import CommentBody
from app.web.oauth import StartBody as OAuthStartBody

bp = Blueprint("openapi", __name__)

OPENAPI_VERSION = "3.1.0"
JSON_ROUTE_PREFIXES = ("/api/", "/runtime-tools/", "/mcp/")

# --- security schemes ------------------------------------------------------------------------------------------

SECURITY_SCHEMES = {
    "apiKey": {
        "type": "http",
        "scheme": "bearer",
        "description": "A personal board API key (`sb_...`), created on the account page. No CSRF header needed.",
    },
    "session": {
        "type": "apiKey",
        "in": "cookie",
        "name": "session",
        "description": "The signed-in browser session. State-changing calls also need `csrfToken`.",
    },
    "csrfToken": {
        "type": "apiKey",
        "in": "header",
        "name": "X-CSRFToken",
        "description": "The CSRF token of the session (the one pages hand to htmx).",
    },
    "runToken": {
        "type": "http",
        "scheme": "bearer",
        "bearerFormat": "JWT",
        "description": "The short-lived, run-bound runtime-tools token handed to an agent's heartbeat run.",
    },
}
BOARD_READ = ({"apiKey": []}, {"session": []})
BOARD_WRITE = ({"apiKey": []}, {"session": [], "csrfToken": []})
RUNTIME = ({"runToken": []},)
PUBLIC: tuple[dict, ...] = ()

# --- response models -------------------------------------------------------------------------------------------


class ErrorResponse(BaseModel):
    """Every refusal: `{"error": "<message>"}` with the documented status."""

    error: str


class ConnectRefusedResponse(ErrorResponse):
    """The provider refused the credentials; the connection was created and can be finished later."""

    connectionId: uuid.UUID | None = None


class ValidationDetail(BaseModel):
    loc: list[str | int]
    msg: str
    type: str


class ValidationErrorResponse(BaseModel):
    """The body failed validation; each detail names the field (`loc`) and why."""

    error: Literal["Validation error"]
    details: list[ValidationDetail]


class IssueResponse(BaseModel):
    id: uuid.UUID
    identifier: str
    title: str
    status: str
    description: str
    assigneeAgentId: uuid.UUID | None
    responsibleUserId: uuid.UUID | None


class IssueListResponse(BaseModel):
    issues: list[IssueResponse]


class CommentCreatedResponse(BaseModel):
    id: uuid.UUID
    body: str


class CommentResponse(BaseModel):
    id: uuid.UUID
    issueId: uuid.UUID
    body: str
    authorUserId: uuid.UUID | None
    authorAgentId: uuid.UUID | None
    createdAt: datetime | None


class RunResponse(BaseModel):
    id: uuid.UUID
    companyId: uuid.UUID
    agentId: uuid.UUID
    issueId: uuid.UUID | None
    status: str
    invocationSource: str
    error: str | None
    contextSnapshotKeys: list[str]
    createdAt: datetime | None
    startedAt: datetime | None
    finishedAt: datetime | None


class ConnectionConfigResponse(BaseModel):
    connectionMethodKey: str | None
    methodConfig: dict[str, Any]


class AudienceResponse(BaseModel):
    allAgents: bool
    agentIds: list[uuid.UUID]


class ConnectionToolResponse(BaseModel):
    name: str
    description: str | None
    isWrite: bool
    action: Literal["allow", "ask_first", "block"]


class ConnectionResponse(BaseModel):
    id: uuid.UUID
    companyId: uuid.UUID
    appSlug: str
    name: str
    status: str
    enabled: bool
    healthStatus: str
    authKind: str
    identity: Literal["organization", "user"] | None
    config: ConnectionConfigResponse
    agentInstructions: dict[str, Any] | None
    providerAccountLabel: str | None
    audience: AudienceResponse
    createdByUserId: uuid.UUID | None
    tools: list[ConnectionToolResponse]


class OAuthStartResponse(BaseModel):
    authorizationUrl: str = Field(
        description="Open in a popup (or navigate to it) to sign in with the provider."
    )


class ConnectionListResponse(BaseModel):
    connections: list[ConnectionResponse]


class InteractionResponse(BaseModel):
    id: uuid.UUID
    companyId: uuid.UUID
    issueId: uuid.UUID
    kind: str
    status: str
    title: str
    summary: str
    payload: dict[str, Any]
    result: dict[str, Any] | None
    addresseeUserId: uuid.UUID | None
    requestingAgentId: uuid.UUID | None
    sourceRunId: uuid.UUID | None
    resolvedByUserId: uuid.UUID | None
    resolvedAt: datetime | None
    createdAt: datetime | None
    updatedAt: datetime | None


ServiceState = Literal["ready", "needs_user_action", "available", "unavailable"]


class SetupServiceResponse(BaseModel):
    service: str
    name: str
    description: str | None
    logoUrl: str | None
    methods: list[dict[str, Any]]
    source: Literal["catalog", "configured"]
    state: ServiceState
    connectionId: uuid.UUID | None


class ExistingConnectionResponse(BaseModel):
    id: uuid.UUID
    name: str
    status: str
    enabled: bool
    providerAccountLabel: str | None


class SetupOptionsResponse(BaseModel):
    version: Literal[1]
    service: SetupServiceResponse
    existingConnections: list[ExistingConnectionResponse]
    requestedAgentId: str | None
    interaction: InteractionResponse


class SearchResultResponse(BaseModel):
    service: str = Field(description="The identifier to pass to connection_request.")
    name: str
    description: str | None
    logoUrl: str | None
    methods: list[dict[str, Any]]
    source: Literal["catalog", "configured"]
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


class JsonRpcRequest(BaseModel):
    """One JSON-RPC 2.0 message: a request (`method` and `id`), a notification (`method`, no `id`), or the client's
    response to a server request (no `method`). The endpoint parses it by hand (a body that is not JSON, or nested
    deeper than 64 levels, is 400 `-32700`; a batch, a non-object or a `method` that is not a string is 400 `-32600`;
    `params` that are neither an object nor null are 400 `-32602`), so this model documents the shape rather than
    validating it. Messages without a `method`, and notifications, are answered 202 with no body."""

    model_config = ConfigDict(extra="allow")

    jsonrpc: Any = Field(default="2.0", description='`"2.0"` (not checked)')
    id: Any = Field(default=None, description="Echoed in the answer; absent for notifications")
    method: str = Field(
        default=None,
        description="`initialize`, `ping`, `tools/list`, `tools/call`, `notifications/...`, or any other name "
        "(404 `-32601`); absent in a response from the client",
        json_schema_extra=lambda schema: schema.pop("default", None),
    )
    params: dict[str, Any] | None = None


class JsonRpcError(BaseModel):
    code: int
    message: str
    data: Any = None


class JsonRpcResponse(BaseModel):
    """A result, or an error object (`-32700` parse, `-32600` invalid request, `-32601` unknown method or tool,
    `-32602` invalid params). Tool failures the agent should read are results with `isError: true`."""

    jsonrpc: Literal["2.0"]
    id: Any = None
    result: dict[str, Any] | None = None
    error: JsonRpcError | None = None


class McpDiscoveryResponse(BaseModel):
    name: str
    protocolVersion: str


class OpenApiDocument(BaseModel):
    model_config = ConfigDict(extra="allow")

    openapi: str
    info: dict[str, Any]
    paths: dict[str, Any]


# --- the registry --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One documented response: a description and a model (or a union of models), or no body at all."""

    description: str
    models: tuple[type[BaseModel], ...] = ()


@dataclass(frozen=True)
class Operation:
    endpoint: str
    method: str
    path: str
    summary: str
    tag: str
    security: tuple[dict, ...]
    responses: dict[int, Answer]
    body: type[BaseModel] | None = None
    description: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def operation_id(self) -> str:
        return self.endpoint.replace(".", "_")


def _e(description: str) -> Answer:
    return Answer(description, (ErrorResponse,))


UNAUTHENTICATED = _e("No valid session, API key or token")
TEXT_RULE = (
    "; text anywhere in the body (keys included) with a NUL character or a lone UTF-16 surrogate is refused "
    "(`string_nul`, `string_surrogate`, location under `body`), as is JSON nested deeper than 64 levels"
)
TOO_LARGE = _e(
    "The body is larger than the server accepts (`SWITCHBOARD_MAX_CONTENT_LENGTH`, 1 MiB by default)"
)
NOT_FOUND = _e("Not found, or not visible to the caller (another company's objects look missing)")
BAD_BODY = Answer(
    "The body is not a JSON object, failed validation (including rules of the app's connection method, such as a "
    "credential it requires), or (session callers) lacks the CSRF token" + TEXT_RULE,
    (ValidationErrorResponse, ErrorResponse),
)
READ_ANSWERS = {401: UNAUTHENTICATED, 404: NOT_FOUND}
WRITE_ANSWERS = {
    400: BAD_BODY,
    401: UNAUTHENTICATED,
    403: _e("The caller may not change this"),
    404: NOT_FOUND,
    409: _e("The object is no longer in a state that allows this"),
    413: TOO_LARGE,
    422: _e("Refused by the rules (the message says why)"),
}
RUNTIME_ANSWERS = {
    400: Answer(
        "The body is not a JSON object or failed validation" + TEXT_RULE,
        (ValidationErrorResponse, ErrorResponse),
    ),
    401: _e("The runtime-tools token is missing, invalid, or expired"),
    403: _e("The token's run is not live, or the responsible person lost write access"),
    404: _e("The run's task or agent no longer exists"),
    409: _e("The agent no longer owns the task, the task is closed, or the request was already resolved"),
    413: TOO_LARGE,
    422: _e("The service is not available, or the run is not bound to a task"),
}


def _board_read(endpoint, path, summary, tag, model, description="") -> Operation:
    return Operation(
        endpoint=f"api.{endpoint}",
        method="get",
        path=path,
        summary=summary,
        tag=tag,
        security=BOARD_READ,
        responses={200: Answer("OK", (model,)), **READ_ANSWERS},
        description=description,
    )


def _board_write(endpoint, method, path, summary, tag, body, success, answers=None) -> Operation:
    return Operation(
        endpoint=f"api.{endpoint}",
        method=method,
        path=path,
        summary=summary,
        tag=tag,
        security=BOARD_WRITE,
        body=body,
        responses={**success, **WRITE_ANSWERS, **(answers or {})},
    )


def _runtime_post(endpoint, path, summary, body, answer: Answer) -> Operation:
    return Operation(
        endpoint=f"runtime.{endpoint}",
        method="post",
        path=path,
        summary=summary,
        tag="runtime",
        security=RUNTIME,
        body=body,
        responses={200: answer, **RUNTIME_ANSWERS},
    )


def mcp_operations(path: str, endpoints: tuple[str, str], tag: str, what: str) -> list[Operation]:
    """The two operations of a stateless MCP-over-HTTP endpoint (shared transport rules, see app/web/jsonrpc.py).

    `endpoints` names the Flask endpoints of the GET (discovery) and POST (JSON-RPC) views.
    """
    auth_answers = {
        401: _e("The runtime-tools token is missing, invalid, or expired"),
        403: _e("The token's run is not live"),
    }
    return [
        Operation(
            endpoint=endpoints[0],
            method="get",
            path=path,
            summary=f"{what}: discovery",
            tag=tag,
            security=RUNTIME,
            responses={
                200: Answer("Server name and protocol version", (McpDiscoveryResponse,)),
                **auth_answers,
                405: Answer("The client asked for an SSE stream (`Accept: text/event-stream`); use POST"),
            },
        ),
        Operation(
            endpoint=endpoints[1],
            method="post",
            path=path,
            summary=f"{what}: one JSON-RPC message",
            tag=tag,
            security=RUNTIME,
            body=JsonRpcRequest,
            description="Stateless Streamable HTTP: JSON responses only, no session id, no SSE.",
            responses={
                200: Answer("A JSON-RPC result or tool result", (JsonRpcResponse,)),
                202: Answer(
                    "A notification, or a message without `method` (the client's response): accepted, nothing to say"
                ),
                400: Answer(
                    "Parse error (`-32700`: not JSON, or nested deeper than 64 levels), invalid request (`-32600`), "
                    "invalid params (`-32602`), or text with a NUL character or a lone UTF-16 surrogate anywhere in "
                    "the message (`-32602`)",
                    (JsonRpcResponse,),
                ),
                **auth_answers,
                404: Answer("Unknown method or tool", (JsonRpcResponse,)),
                413: Answer(
                    "The body is larger than the server accepts (`-32600`; `SWITCHBOARD_MAX_CONTENT_LENGTH`)",
                    (JsonRpcResponse,),
                ),
            },
        ),
    ]


OPERATIONS: list[Operation] = [
    Operation(
        endpoint="openapi.openapi_document",
        method="get",
        path="/api/openapi.json",
        summary="This document",
        tag="meta",
        security=PUBLIC,
        responses={200: Answer("The OpenAPI 3.1 document", (OpenApiDocument,))},
    ),
    # tasks
    _board_read(
        "list_company_issues",
        "/api/companies/{company_id}/issues",
        "List a company's tasks",
        "tasks",
        IssueListResponse,
    ),
    _board_read("get_issue", "/api/issues/{issue_id}", "Read a task", "tasks", IssueResponse),
    _board_write(
        "create_comment",
        "post",
        "/api/issues/{issue_id}/comments",
        "Comment on a task (wakes its assigned agent)",
        "tasks",
        CommentBody,
        {201: Answer("The comment was added", (CommentCreatedResponse,))},
    ),
    _board_read("get_comment", "/api/comments/{comment_id}", "Read a comment", "tasks", CommentResponse),
    _board_read("get_run", "/api/runs/{run_id}", "Read a heartbeat run", "tasks", RunResponse),
    # connections
    _board_write(
        "connect_app",
        "post",
        "/api/companies/{company_id}/tools/apps/connect",
        "Start a connection (and finish it when credentials are given)",
        "connections",
        ConnectBody,
        {201: Answer("The connection", (ConnectionResponse,))},
        {
            422: Answer(
                "Refused by the rules, or the provider refused the credentials (then `connectionId` names the draft)",
                (ConnectRefusedResponse,),
            )
        },
    ),
    _board_write(
        "finish_app",
        "post",
        "/api/companies/{company_id}/tools/apps/{connection_id}/finish",
        "Finish or reconnect a connection",
        "connections",
        FinishBody,
        {200: Answer("The connection", (ConnectionResponse,))},
    ),
    _board_write(
        "patch_connection",
        "patch",
        "/api/tool-connections/{connection_id}",
        "Change a connection: name, enabled, instructions, method config, audience, tool policies",
        "connections",
        PatchBody,
        {200: Answer("The connection", (ConnectionResponse,))},
    ),
    _board_read(
        "list_company_connections",
        "/api/companies/{company_id}/tool-connections",
        "List a company's tool connections",
        "connections",
        ConnectionListResponse,
    ),
    _board_read(
        "get_connection",
        "/api/tool-connections/{connection_id}",
        "Read a connection",
        "connections",
        ConnectionResponse,
    ),
    Operation(
        endpoint="oauth.start_json",
        method="post",
        path="/api/tools/oauth/{connection_id}/start",
        summary="Start an OAuth sign-in for a connection (the task card opens the URL in a popup)",
        tag="connections",
        security=BOARD_WRITE,
        body=OAuthStartBody,
        responses={200: Answer("Where to sign in", (OAuthStartResponse,)), **WRITE_ANSWERS},
    ),
    # connection intents (cards)
    Operation(
        endpoint="api.intent_setup_options",
        method="get",
        path="/api/connection-intents/{interaction_id}/setup-options",
        summary="What the addressed person needs to answer a connection card",
        tag="intents",
        security=BOARD_READ,
        responses={
            200: Answer("Setup options", (SetupOptionsResponse,)),
            401: UNAUTHENTICATED,
            403: _e("The card is addressed to someone else"),
            404: NOT_FOUND,
        },
    ),
    _board_write(
        "intent_phase",
        "post",
        "/api/connection-intents/{interaction_id}/phase",
        "Record the setup phase the addressed person is in",
        "intents",
        PhaseBody,
        {200: Answer("The card", (InteractionResponse,))},
    ),
    _board_write(
        "intent_complete",
        "post",
        "/api/connection-intents/{interaction_id}/complete",
        "Answer a card with a connection (wakes the agent)",
        "intents",
        CompleteBody,
        {200: Answer("The resolved card", (InteractionResponse,))},
    ),
    _board_write(
        "intent_decline",
        "post",
        "/api/connection-intents/{interaction_id}/decline",
        "Decline a card (wakes the agent)",
        "intents",
        DeclineBody,
        {200: Answer("The resolved card", (InteractionResponse,))},
    ),
    # runtime tools (agents)
    _runtime_post(
        "rest_search",
        "/runtime-tools/connections/search",
        "connections_search: connectable services and this run's access state for each",
        SearchBody,
        Answer("Ranked services (at most 20)", (SearchResponse,)),
    ),
    _runtime_post(
        "rest_request",
        "/runtime-tools/connections/request",
        "connection_request: ask the responsible person for access (one card per service)",
        RequestBody,
        Answer("Ready now, or a card was sent", (RequestResponse,)),
    ),
    *mcp_operations(
        "/mcp/runtime-tools",
        ("runtime.mcp_discovery", "runtime.mcp_rpc"),
        "runtime",
        "Runtime tools MCP endpoint",
    ),
]


GATEWAY_OPERATIONS = mcp_operations(
    "/mcp/gateway", ("gateway.discovery", "gateway.rpc"), "gateway", "Tool gateway MCP endpoint"
)


def all_operations(app: Flask | None = None) -> list[Operation]:
    """Every documented operation of this app (the gateway's once its blueprint is registered)."""
    app = app or current_app
    return [*OPERATIONS, *(GATEWAY_OPERATIONS if "gateway" in app.blueprints else [])]


# --- building the document -------------------------------------------------------------------------------------

_PATH_PARAM = re.compile(r"{([^}]+)}")


def flask_rule_to_path(rule: str) -> str:
    """`/api/issues/<issue_id>` (or `<uuid:issue_id>`) -> `/api/issues/{issue_id}`."""
    return re.sub(r"<(?:[^:<>]+:)?([^<>]+)>", r"{\1}", rule)


def _content(answer: Answer, refs: dict) -> dict | None:
    if not answer.models:
        return None
    schemas = [refs[(m, "serialization")] for m in answer.models]
    schema = schemas[0] if len(schemas) == 1 else {"anyOf": schemas}
    return {"application/json": {"schema": schema}}


def _operation_object(op: Operation, refs: dict) -> dict:
    names = _PATH_PARAM.findall(op.path)
    result: dict = {
        "operationId": op.operation_id,
        "summary": op.summary,
        "tags": [op.tag],
        "security": list(op.security),
        "responses": {},
    }
    if op.description:
        result["description"] = op.description
    if names:
        result["parameters"] = [
            {"name": name, "in": "path", "required": True, "schema": {"type": "string", "format": "uuid"}}
            for name in names
        ]
    if op.body is not None:
        required = any(f.is_required() for f in op.body.model_fields.values())
        result["requestBody"] = {
            "required": required,
            "content": {"application/json": {"schema": refs[(op.body, "validation")]}},
        }
    for status, answer in sorted(op.responses.items()):
        response: dict = {"description": answer.description}
        content = _content(answer, refs)
        if content is not None:
            response["content"] = content
        result["responses"][str(status)] = response
    return result


def build_document(
    app: Flask | None = None, operations: list[Operation] | None = None, server_url: str | None = None
) -> dict:
    """The OpenAPI 3.1 document for the given operations (all of them by default)."""
    operations = all_operations(app) if operations is None else operations
    wanted: dict = {}
    for op in operations:
        if op.body is not None:
            wanted[(op.body, "validation")] = None
        for answer in op.responses.values():
            for model in answer.models:
                wanted[(model, "serialization")] = None
    refs, top = models_json_schema(list(wanted), ref_template="#/components/schemas/{model}")
    paths: dict = {}
    for op in operations:
        paths.setdefault(op.path, {})[op.method] = _operation_object(op, refs)
    document = {
        "openapi": OPENAPI_VERSION,
        "info": {
            "title": "Switchboard",
            "version": "1",
            "description": (
                "Board API (session cookie + X-CSRFToken, or a bearer API key), runtime tools for agents (a bearer "
                'run token) and their MCP endpoints. Errors are `{"error": "..."}`; validation failures are 400 '
                '`{"error": "Validation error", "details": [...]}`.'
            ),
        },
        "paths": paths,
        "components": {"schemas": top.get("$defs", {}), "securitySchemes": SECURITY_SCHEMES},
    }
    if server_url:
        document["servers"] = [{"url": server_url}]
    return document


@bp.get("/api/openapi.json")
def openapi_document():
    app = current_app._get_current_object()
    document = app.extensions.get("switchboard_openapi")
    if document is None:  # built once per app: the models and routes do not change while it runs
        server_url = str(app.config.get("PUBLIC_BASE_URL") or "").rstrip("/")
        document = app.extensions["switchboard_openapi"] = build_document(app, server_url=server_url)
    return jsonify(document)


def undocumented_routes(app: Flask, operations: list[Operation] | None = None) -> list[str]:
    """JSON routes in the URL map that the document does not describe (`METHOD path endpoint`)."""
    documented = {(op.endpoint, op.method.upper(), op.path) for op in (operations or all_operations(app))}
    missing = []
    for rule in app.url_map.iter_rules():
        if not rule.rule.startswith(JSON_ROUTE_PREFIXES):
            continue
        for method in sorted((rule.methods or set()) - {"HEAD", "OPTIONS"}):
            key = (rule.endpoint, method, flask_rule_to_path(rule.rule))
            if key not in documented:
                missing.append(f"{method} {key[2]} ({rule.endpoint})")
    return missing


def stale_operations(app: Flask, operations: list[Operation] | None = None) -> list[str]:
    """Documented operations that no route in the URL map serves."""
    served = {
        (rule.endpoint, method, flask_rule_to_path(rule.rule))
        for rule in app.url_map.iter_rules()
        for method in (rule.methods or set())
    }
    return [
        f"{op.method.upper()} {op.path} ({op.endpoint})"
        for op in (operations or all_operations(app))
        if (op.endpoint, op.method.upper(), op.path) not in served
    ]
