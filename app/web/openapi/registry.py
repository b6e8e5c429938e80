"""`OPERATIONS`: one entry per (Flask endpoint, method) with path, summary, security, request and response models."""

from __future__ import annotations

from dataclasses import dataclass, field

from flask import Flask, current_app
from pydantic import BaseModel

from app.web.agents.runtime import RequestBody, SearchBody
from app.web.api.connections import ConnectBody, FinishBody, PatchBody
from app.web.api.intents import CompleteBody, DeclineBody, PhaseBody
from app.web.api.tasks import CommentBody
from app.web.notifications.schemas import inbox_operation  # notifications: issue 15
from app.web.oauth import StartBody as OAuthStartBody
from app.web.openapi.responses import (
    CommentCreatedResponse,
    CommentResponse,
    ConnectionListResponse,
    ConnectionResponse,
    ConnectRefusedResponse,
    ErrorResponse,
    InteractionResponse,
    IssueListResponse,
    IssueResponse,
    JsonRpcRequest,
    JsonRpcResponse,
    McpDiscoveryResponse,
    OAuthStartResponse,
    OpenApiDocument,
    RequestResponse,
    RunResponse,
    SearchResponse,
    SetupOptionsResponse,
    ValidationErrorResponse,
)

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
BOARD_READ: tuple[dict, ...] = ({"apiKey": []}, {"session": []})
BOARD_WRITE: tuple[dict, ...] = ({"apiKey": []}, {"session": [], "csrfToken": []})
RUNTIME: tuple[dict, ...] = ({"runToken": []},)
PUBLIC: tuple[dict, ...] = ()


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


def _board_read(
    endpoint: str, path: str, summary: str, tag: str, model: type[BaseModel], description: str = ""
) -> Operation:
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


def _board_write(
    endpoint: str,
    method: str,
    path: str,
    summary: str,
    tag: str,
    body: type[BaseModel] | None,
    success: dict[int, Answer],
    answers: dict[int, Answer] | None = None,
) -> Operation:
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


def _runtime_post(endpoint: str, path: str, summary: str, body: type[BaseModel], answer: Answer) -> Operation:
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
    """The two operations of a stateless MCP-over-HTTP endpoint (shared transport rules, see app/web/agents/jsonrpc.py).

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
    Operation(
        endpoint="api.delete_connection",
        method="delete",
        path="/api/tool-connections/{connection_id}",
        summary="Delete a connection (a finished one, a disconnected one, or an unfinished setup)",
        description=(
            "Revokes its OAuth tokens at the provider when the provider's metadata names a revocation endpoint "
            "(RFC 7009), then deletes it with its identity grants, credentials, agent access, tool index and "
            "policies. Pending connection cards whose saved setup it was keep waiting without it; pending cards "
            "that ask for this very connection (`connection:<id>`) expire."
        ),
        tag="connections",
        security=BOARD_WRITE,
        responses={
            204: Answer("Deleted; no body"),
            401: UNAUTHENTICATED,
            403: _e("The caller may not configure this connection (its creator or a connection manager can)"),
            404: NOT_FOUND,
            409: _e("Deleting is not allowed now: tool approval requests for it still wait for an answer"),
        },
    ),
    _board_write(
        "disconnect_connection",
        "post",
        "/api/tool-connections/{connection_id}/disconnect",
        "Disconnect a connection: revoke at the provider, delete credentials; settings stay for Reconnect",
        "connections",
        None,
        {200: Answer("The connection, now `disconnected`", (ConnectionResponse,))},
        {409: _e("The connection is not connected (an unfinished setup, or already disconnected)")},
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
    inbox_operation(Operation, Answer, BOARD_READ, READ_ANSWERS),  # notifications: issue 15
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
