"""What a JSON view says about itself: the decorators that attach its request and response models to it.

A view is documented by the decorator on it (`board_read`, `board_write`, `runtime_post`, `mcp_discovery`,
`mcp_rpc`, or `documented` for anything else); its path, method and operation id come from the Flask URL map
(`app.web.openapi.document`). The request body model is the class the view validates with (`parse_body`), and the
response models are the classes the view serializes with (`app.web.openapi.responses.respond`), so the document
cannot say one thing while the route does another.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TypeVar

from pydantic import BaseModel

from app.web.openapi.responses import (
    ConnectRefusedResponse,
    ErrorResponse,
    JsonRpcRequest,
    JsonRpcResponse,
    McpDiscoveryResponse,
    ValidationErrorResponse,
)

ViewT = TypeVar("ViewT", bound=Callable)
VIEW_ATTRIBUTE = "openapi_operation"

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


# --- what a view declares --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Answer:
    """One documented response: a description and a model (or a union of models), or no body at all."""

    description: str
    models: tuple[type[BaseModel], ...] = ()


@dataclass(frozen=True)
class Doc:
    """A view's own part of its operation; `method` only when the view's rule serves several methods."""

    summary: str
    tag: str
    security: tuple[dict, ...]
    responses: dict[int, Answer]
    body: type[BaseModel] | None = None
    description: str = ""
    method: str | None = None


@dataclass(frozen=True)
class Operation:
    """A documented operation: the view's `Doc` at the place the URL map serves it."""

    endpoint: str
    method: str
    path: str
    doc: Doc = field(repr=False)

    @property
    def operation_id(self) -> str:
        return self.endpoint.replace(".", "_")

    @property
    def body(self) -> type[BaseModel] | None:
        return self.doc.body


def documented(
    summary: str,
    *,
    tag: str,
    security: tuple[dict, ...],
    responses: dict[int, Answer],
    body: type[BaseModel] | None = None,
    description: str = "",
    method: str | None = None,
) -> Callable[[ViewT], ViewT]:
    """Attach the operation's description to the view (put it under the route decorator)."""
    doc = Doc(summary, tag, security, responses, body, description, method)

    def attach(view: ViewT) -> ViewT:
        setattr(view, VIEW_ATTRIBUTE, doc)
        return view

    return attach


def doc_of(view: Callable | None) -> Doc | None:
    """The `Doc` a view carries (wrappers made with `functools.wraps` carry it too), or None."""
    return getattr(view, VIEW_ATTRIBUTE, None)


# --- the answers views share -----------------------------------------------------------------------------------


def error(description: str) -> Answer:
    return Answer(description, (ErrorResponse,))


UNAUTHENTICATED = error("No valid session, API key or token")
TEXT_RULE = (
    "; text anywhere in the body (keys included) with a NUL character or a lone UTF-16 surrogate is refused "
    "(`string_nul`, `string_surrogate`, location under `body`), as is JSON nested deeper than 64 levels"
)
TOO_LARGE = error(
    "The body is larger than the server accepts (`SWITCHBOARD_MAX_CONTENT_LENGTH`, 1 MiB by default)"
)
NOT_FOUND = error("Not found, or not visible to the caller (another company's objects look missing)")
BAD_BODY = Answer(
    "The body is not a JSON object, failed validation (including rules of the app's connection method, such as a "
    "credential it requires), or (session callers) lacks the CSRF token" + TEXT_RULE,
    (ValidationErrorResponse, ErrorResponse),
)
READ_ANSWERS = {401: UNAUTHENTICATED, 404: NOT_FOUND}
WRITE_ANSWERS = {
    400: BAD_BODY,
    401: UNAUTHENTICATED,
    403: error("The caller may not change this"),
    404: NOT_FOUND,
    409: error("The object is no longer in a state that allows this"),
    413: TOO_LARGE,
    422: error("Refused by the rules (the message says why)"),
}
# The provider refused the credentials of a setup: the draft was kept (`connectionId` names it).
SETUP_REFUSED = Answer(
    "Refused by the rules, or the provider refused the credentials (then `connectionId` names the draft)",
    (ConnectRefusedResponse,),
)
RUNTIME_ANSWERS = {
    400: Answer(
        "The body is not a JSON object or failed validation" + TEXT_RULE,
        (ValidationErrorResponse, ErrorResponse),
    ),
    401: error("The runtime-tools token is missing, invalid, or expired"),
    403: error("The token's run is not live, or the responsible person lost write access"),
    404: error("The run's task or agent no longer exists"),
    409: error("The agent no longer owns the task, the task is closed, or the request was already resolved"),
    413: TOO_LARGE,
    422: error("The service is not available, or the run is not bound to a task"),
}
MCP_AUTH_ANSWERS = {
    401: error("The runtime-tools token is missing, invalid, or expired"),
    403: error("The token's run is not live"),
}


# --- the shapes of operation most views have -------------------------------------------------------------------


def board_read(
    summary: str, tag: str, model: type[BaseModel], description: str = ""
) -> Callable[[ViewT], ViewT]:
    """A board GET answering `model`."""
    return documented(
        summary,
        tag=tag,
        security=BOARD_READ,
        responses={200: Answer("OK", (model,)), **READ_ANSWERS},
        description=description,
    )


def board_write(
    summary: str,
    tag: str,
    body: type[BaseModel] | None,
    success: dict[int, Answer],
    answers: dict[int, Answer] | None = None,
) -> Callable[[ViewT], ViewT]:
    """A board change: the session needs the CSRF token; the usual refusals, plus `answers`."""
    return documented(
        summary,
        tag=tag,
        security=BOARD_WRITE,
        body=body,
        responses={**success, **WRITE_ANSWERS, **(answers or {})},
    )


def runtime_post(summary: str, body: type[BaseModel], answer: Answer) -> Callable[[ViewT], ViewT]:
    """A runtime-tools REST route (run token)."""
    return documented(
        summary, tag="runtime", security=RUNTIME, body=body, responses={200: answer, **RUNTIME_ANSWERS}
    )


def mcp_discovery(what: str, tag: str) -> Callable[[ViewT], ViewT]:
    """The GET of a stateless MCP-over-HTTP endpoint (shared transport rules: app/web/agents/jsonrpc.py)."""
    return documented(
        f"{what}: discovery",
        tag=tag,
        security=RUNTIME,
        responses={
            200: Answer("Server name and protocol version", (McpDiscoveryResponse,)),
            **MCP_AUTH_ANSWERS,
            405: Answer("The client asked for an SSE stream (`Accept: text/event-stream`); use POST"),
        },
    )


def mcp_rpc(what: str, tag: str) -> Callable[[ViewT], ViewT]:
    """The POST of a stateless MCP-over-HTTP endpoint: one JSON-RPC message."""
    return documented(
        f"{what}: one JSON-RPC message",
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
            **MCP_AUTH_ANSWERS,
            404: Answer("Unknown method or tool", (JsonRpcResponse,)),
            413: Answer(
                "The body is larger than the server accepts (`-32600`; `SWITCHBOARD_MAX_CONTENT_LENGTH`)",
                (JsonRpcResponse,),
            ),
        },
    )
