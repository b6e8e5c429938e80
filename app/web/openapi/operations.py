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
    JsonRpcBatchResponse,
    JsonRpcBody,
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
    """One documented response: a description and a model (or a union of models), or no body at all; the headers
    it always carries (OpenAPI header objects by name); `streams`: it may instead be an SSE stream."""

    description: str
    models: tuple[type[BaseModel], ...] = ()
    headers: dict[str, dict] = field(default_factory=dict)
    streams: bool = False


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
    # The body is `application/x-www-form-urlencoded` (OAuth's endpoints), else JSON.
    form: bool = False


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
    form: bool = False,
) -> Callable[[ViewT], ViewT]:
    """Attach the operation's description to the view (put it under the route decorator)."""
    doc = Doc(summary, tag, security, responses, body, description, method, form)

    def attach(view: ViewT) -> ViewT:
        setattr(view, VIEW_ATTRIBUTE, doc)
        return view

    return attach


def doc_of(view: Callable | None) -> Doc | None:
    """The `Doc` a view carries (wrappers made with `functools.wraps` carry it too), or None."""
    return getattr(view, VIEW_ATTRIBUTE, None)


# --- the answers views share -----------------------------------------------------------------------------------


def _header(description: str, schema: dict) -> dict:
    return {"description": description, "required": True, "schema": schema}


RETRY_AFTER = {
    "Retry-After": _header("Seconds to wait before trying again", {"type": "integer", "minimum": 1})
}
BEARER_CHALLENGE = {
    "WWW-Authenticate": _header(
        '`Bearer error="invalid_token"`; the gateway adds its `resource_metadata` URL (RFC 9728) and leaves out the '
        "error when no token was sent",
        {"type": "string", "pattern": "^Bearer"},
    )
}
CLOSES = {"Connection": _header("The connection is closed after this answer", {"const": "close"})}


def error(description: str, headers: dict[str, dict] | None = None) -> Answer:
    return Answer(description, (ErrorResponse,), headers or {})


def rpc_error(description: str, headers: dict[str, dict] | None = None) -> Answer:
    return Answer(description, (JsonRpcResponse,), headers or {})


UNAUTHENTICATED = error("No valid session, API key or token")
TEXT_RULE = (
    "; text anywhere in the body (keys included) with a NUL character or a lone UTF-16 surrogate is refused "
    "(`string_nul`, `string_surrogate`, location under `body`), as is JSON nested deeper than 64 levels"
)
TOO_LARGE_TEXT = (
    "The body is larger than the server accepts (`SWITCHBOARD_MAX_CONTENT_LENGTH`, 1 MiB by default)"
)
TOO_LARGE = error(TOO_LARGE_TEXT, CLOSES)
THROTTLED_TEXT = (
    "Too many failed authentications from this address recently (API keys, run tokens and sign-ins count together): "
    "refused before the credential is checked"
)
THROTTLED = error(THROTTLED_TEXT, RETRY_AFTER)
NOT_FOUND = error("Not found, or not visible to the caller (another company's objects look missing)")
BAD_QUERY = Answer(
    "The query string holds a NUL character or a lone UTF-16 surrogate (`string_nul`, `string_surrogate`, location "
    "under `query`)",
    (ValidationErrorResponse,),
)
BAD_BODY = Answer(
    "The body is not a JSON object or failed validation (including rules of the app's connection method, such as a "
    "credential it requires), or (session callers) lacks the CSRF token" + TEXT_RULE,
    (ValidationErrorResponse, ErrorResponse),
)
# Any request: a query string is checked for unstorable text, and a declared body over the limit is refused unread.
ANY_REQUEST_ANSWERS = {400: BAD_QUERY, 413: TOO_LARGE, 429: THROTTLED}
READ_ANSWERS = {**ANY_REQUEST_ANSWERS, 401: UNAUTHENTICATED, 404: NOT_FOUND}
WRITE_ANSWERS = {
    400: BAD_BODY,
    401: UNAUTHENTICATED,
    403: error("The caller may not change this"),
    404: NOT_FOUND,
    409: error("The object is no longer in a state that allows this"),
    413: TOO_LARGE,
    422: error("Refused by the rules (the message says why)"),
    429: THROTTLED,
}
# Values the document cannot judge: they are checked against the state they are for (`conflicts_with_state`).
STATE_CONFLICT = Answer(
    "The values do not fit the state they are for (the details name each): a field or credential the app's "
    "connection method requires or does not have, a tool the connection does not have, an agent not of this company, "
    "a name another connection has; or the object is no longer in a state that allows this",
    (ValidationErrorResponse, ConnectRefusedResponse),
)
# The provider refused the credentials of a setup: the draft was kept (`connectionId` names it).
SETUP_REFUSED = Answer(
    "Refused by the rules, or the provider refused the credentials (then `connectionId` names the draft)",
    (ConnectRefusedResponse,),
)
FOREIGN_ORIGIN = "an `Origin` header that is not Switchboard's"
RUNTIME_ANSWERS = {
    400: Answer(
        "The body is not a JSON object or failed validation" + TEXT_RULE,
        (ValidationErrorResponse, ErrorResponse),
    ),
    401: error("The runtime-tools token is missing, invalid, or expired", BEARER_CHALLENGE),
    403: error(f"The token's run is not live, the responsible person lost write access, or {FOREIGN_ORIGIN}"),
    404: error(
        "The run's task or agent no longer exists, or a `connectionId` that does not serve the service for this run"
    ),
    409: error(
        "The agent no longer owns the task, the task is closed, the request was already resolved or declined in "
        "this continuation, or several connections of the service exist (name one with `connectionId`)"
    ),
    413: TOO_LARGE,
    422: error("The service is not available, or the run is not bound to a task"),
    429: THROTTLED,
}


def _mcp_refusals(gateway: bool) -> dict[int, Answer]:
    """The token, run, Origin and throttle refusals of an MCP door: the gateway says them as JSON-RPC errors
    (`-32001`), the runtime door keeps its contracted `{"error": ...}` body (the Origin refusal is JSON-RPC on
    both)."""
    if gateway:
        return {
            401: rpc_error(
                "The runtime-tools token is missing, invalid, or expired (`-32001`)", BEARER_CHALLENGE
            ),
            403: rpc_error(f"The token's run is not live (`-32001`), or {FOREIGN_ORIGIN} (`-32600`)"),
            429: rpc_error(THROTTLED_TEXT + " (`-32600`)", RETRY_AFTER),
        }
    return {
        401: error("The runtime-tools token is missing, invalid, or expired", BEARER_CHALLENGE),
        403: Answer(
            f"The token's run is not live (`error`), or {FOREIGN_ORIGIN} (JSON-RPC `-32600`)",
            (ErrorResponse, JsonRpcResponse),
        ),
        429: rpc_error(THROTTLED_TEXT + " (`-32600`)", RETRY_AFTER),
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


def mcp_discovery(what: str, tag: str, *, gateway: bool = False) -> Callable[[ViewT], ViewT]:
    """The GET of a stateless MCP-over-HTTP endpoint (shared transport rules: app/web/agents/jsonrpc.py)."""
    return documented(
        f"{what}: discovery",
        tag=tag,
        security=RUNTIME,
        responses={
            200: Answer("Server name and protocol version", (McpDiscoveryResponse,)),
            400: rpc_error(BAD_QUERY.description + " (`-32602`)"),
            **_mcp_refusals(gateway),
            413: rpc_error(TOO_LARGE_TEXT + " (`-32600`)", CLOSES),
            405: Answer(
                "The client asked for an SSE stream (`Accept: text/event-stream`); use POST",
                headers={"Allow": _header("`POST`", {"const": "POST"})},
            ),
        },
    )


def mcp_rpc(what: str, tag: str, *, gateway: bool = False) -> Callable[[ViewT], ViewT]:
    """The POST of a stateless MCP-over-HTTP endpoint: one JSON-RPC message, or a batch."""
    if gateway:
        description = (
            "Stateless Streamable HTTP: no session id. The revision is negotiated per request (`initialize`, the "
            "`MCP-Protocol-Version` header: absent means 2025-03-26, an unsupported one is 400; 2026-07-28 "
            "requests carry `params._meta` and the `Mcp-Method`/`Mcp-Name` headers, and a mismatch is 400). "
            "Batches only on 2025-03-26 (else 400 `-32600`). Request errors are answered at 200, except a "
            "2026-07-28 unknown method (404). A `tools/call` with `params._meta.progressToken` from a client that "
            "accepts `text/event-stream` is answered on an SSE stream (progress, then the result)."
        )
        not_found = "2026-07-28 only: unknown method (`-32601`)"
    else:
        description = (
            "Stateless Streamable HTTP, revision 2025-03-26: JSON responses only, no session id, no SSE. Unknown "
            "methods and tools are HTTP 404 `-32601`; a `tools/list` cursor is 400 `-32602` (nothing is paginated)."
        )
        not_found = "Unknown method or tool (`-32601`)"
    return documented(
        f"{what}: JSON-RPC messages",
        tag=tag,
        security=RUNTIME,
        body=JsonRpcBody,
        description=description,
        responses={
            200: Answer(
                "The answer to a request (a result, a tool result, or an error), or an array of answers to a batch",
                (JsonRpcResponse, JsonRpcBatchResponse),
                streams=gateway,
            ),
            202: Answer(
                "Notifications and messages without `method` (the client's responses): accepted, no body"
            ),
            400: rpc_error(
                "Parse error (`-32700`: not JSON, or nested deeper than 64 levels), invalid request (`-32600`: not "
                "a message, an empty batch, or a batch where the revision has none), invalid params (`-32602`), or "
                "text with a NUL character or a lone UTF-16 surrogate anywhere in the message (`-32602`)"
            ),
            **_mcp_refusals(gateway),
            404: rpc_error(not_found),
            413: rpc_error(TOO_LARGE_TEXT + " (`-32600`)", CLOSES),
        },
    )
