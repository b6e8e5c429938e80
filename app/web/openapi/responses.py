"""The response models: what the views return, for the document and the schemathesis conformance checks."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.json_schema import JsonDict

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
