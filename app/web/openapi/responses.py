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
from pydantic import BaseModel, ConfigDict, Field, PlainSerializer, WithJsonSchema
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


def _drop_default(schema: JsonDict) -> None:
    schema.pop("default", None)


class JsonRpcRequest(BaseModel):
    """One JSON-RPC 2.0 message: a request (`method` and `id`), a notification (`method`, no `id`), or the client's
    response to a server request (no `method`). The endpoint parses it by hand (a body that is not JSON, or nested
    deeper than 64 levels, is 400 `-32700`; a batch, a non-object or a `method` that is not a string is 400 `-32600`;
    `params` that are neither an object nor null are 400 `-32602`), so this model documents the shape rather than
    validating it. Messages without a `method`, and notifications, are answered 202 with no body."""

    model_config = ConfigDict(extra="allow")

    jsonrpc: Any = Field(default="2.0", description='`"2.0"` (not checked)')
    id: Any = Field(default=None, description="Echoed in the answer; absent for notifications")
    # Documented as a string (the schema drops the default); None only stands for "absent" in a client's response.
    method: str = Field(  # type: ignore[assignment]
        default=None,
        description="`initialize`, `ping`, `tools/list`, `tools/call`, `notifications/...`, or any other name "
        "(404 `-32601`); absent in a response from the client",
        json_schema_extra=_drop_default,
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
