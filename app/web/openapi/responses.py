"""The response models every door shares (errors, JSON-RPC, discovery, the document), and `respond`, the one way a
JSON view turns its response model into a response.

A feature's own response models sit beside its views (`app.web.api.tasks`, `...connections`, `...intents`,
`app.web.agents.runtime`, `app.web.notifications.schemas`) and are what those views serialize with; the document
names the same classes (`app.web.openapi.operations`).
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any, Literal

from flask import Response, jsonify
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, RootModel, WithJsonSchema
from pydantic.json_schema import JsonDict

from app.models.base import as_utc


def respond(model: BaseModel, status: int = 200) -> tuple[Response, int]:
    """The model as a JSON response. Fields left unset are left out: optional keys (an inbox item's `outcome`) are
    sent only when the view sets them, so build responses with every field they always carry."""
    return jsonify(model.model_dump(mode="json", exclude_unset=True)), status


def _iso(value: datetime) -> str:
    moment = as_utc(value)
    assert moment is not None  # None is the other arm of the `Moment | None` fields, never serialized here
    return moment.isoformat()


# A moment as the API sends it: ISO 8601 in UTC with an explicit offset (`...+00:00`; SQLite's naive values are UTC).
Moment = Annotated[
    datetime,
    PlainSerializer(_iso, return_type=str),
    WithJsonSchema({"type": "string", "format": "date-time"}),
]


# A service's state for an agent (runtime search results, a card's setup options).
ServiceState = Literal["ready", "needs_user_action", "available", "unavailable"]


class DescribedService(BaseModel):
    """A connectable service as `ServiceIdentity.described` names it; a search result and a card's setup options
    each add its state."""

    service: str
    name: str
    description: str | None
    logoUrl: str | None
    methods: list[dict[str, Any]]
    source: Literal["catalog", "configured"]


# --- errors ----------------------------------------------------------------------------------------------------


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


# --- MCP endpoints ---------------------------------------------------------------------------------------------
# The doors parse JSON-RPC by hand (`app.web.agents.jsonrpc`): these models document what they read and send.


def _drop_default(schema: JsonDict) -> None:
    schema.pop("default", None)


class JsonRpcRequest(BaseModel):
    """A request (`method` and `id`, which may be null) or a notification (`method`, no `id`). Notifications, and
    any method under `notifications/`, are answered 202 with no body. Other keys are ignored."""

    model_config = ConfigDict(extra="allow")

    jsonrpc: Any = Field(default="2.0", description='`"2.0"` (not checked)', json_schema_extra=_drop_default)
    id: Any = Field(
        default=None,
        description="Echoed in the answer; absent for notifications",
        json_schema_extra=_drop_default,
    )
    method: str = Field(
        description="`initialize`, `ping`, `tools/list`, `tools/call`, `notifications/...`, or any other name "
        "(answered with `-32601`)"
    )
    params: dict[str, Any] | None = None


class JsonRpcClientMessage(BaseModel):
    """A message without `method`: the client's response to a server request (`id` with `result` or `error`), or
    a message without `id`. Answered 202 with no body. A message with `id` and neither `result` nor `error` is
    400 `-32600`."""

    model_config = ConfigDict(
        extra="allow",
        json_schema_extra={
            "not": {"required": ["method"]},
            "anyOf": [{"not": {"required": ["id"]}}, {"required": ["result"]}, {"required": ["error"]}],
        },
    )

    jsonrpc: Any = Field(default="2.0", description='`"2.0"` (not checked)', json_schema_extra=_drop_default)
    id: Any = Field(default=None, json_schema_extra=_drop_default)
    result: Any = Field(default=None, json_schema_extra=_drop_default)
    error: Any = Field(default=None, json_schema_extra=_drop_default)


JsonRpcBatch = Annotated[
    list[Any],
    Field(
        min_length=1,
        description="A batch (revision 2025-03-26): each entry is answered as one message would be, in an array "
        "(an entry that is not a message gets an error entry; notifications get none); a batch of notifications "
        "only is answered 202 with no body",
    ),
]


class JsonRpcBody(RootModel[JsonRpcRequest | JsonRpcClientMessage | JsonRpcBatch]):
    """What an MCP door reads: one JSON-RPC message, or a batch of them. Anything else is refused: a body that is
    not JSON, or nested deeper than 64 levels, is 400 `-32700`; a message that is not an object, a `method` that is
    not a string, an empty batch, or an `id` without `method`, `result` or `error` is 400 `-32600`; `params` that
    are neither an object nor null are 400 `-32602`; text with a NUL character or a lone UTF-16 surrogate anywhere
    is 400 `-32602`."""


class JsonRpcError(BaseModel):
    code: int
    message: str
    data: Any = None


class JsonRpcResponse(BaseModel):
    """A result, or an error object (`-32700` parse, `-32600` invalid request, `-32601` unknown method or tool,
    `-32602` invalid params, `-32001` not authorized on the gateway). Tool failures the agent should read are results
    with `isError: true`."""

    jsonrpc: Literal["2.0"]
    id: Any = None
    result: dict[str, Any] | None = None
    error: JsonRpcError | None = None


class JsonRpcBatchResponse(RootModel[list[JsonRpcResponse]]):
    """The answers to a batch, one per entry that is not a notification."""


class McpDiscoveryResponse(BaseModel):
    name: str
    protocolVersion: str


class OpenApiDocument(BaseModel):
    model_config = ConfigDict(extra="allow")

    openapi: str
    info: dict[str, Any]
    paths: dict[str, Any]
