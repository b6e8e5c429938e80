"""Response models of the notification JSON routes, for the OpenAPI document (`app/web/openapi.py`)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel

if TYPE_CHECKING:
    from app.web.openapi.registry import Answer, Operation


class InboxItem(BaseModel):
    """A connection card or a tool approval addressed to the caller."""

    id: uuid.UUID
    kind: Literal["connection_intent", "tool_approval"]
    status: str
    issueId: uuid.UUID
    issueIdentifier: str
    agentId: uuid.UUID | None
    service: str | None = None
    tool: str | None = None
    createdAt: datetime
    outcome: str | None = None
    resolvedAt: datetime | None = None
    resolvedByUserId: uuid.UUID | None = None


class InboxResponse(BaseModel):
    """`tab=open` (default): pending cards on open tasks, newest first; `tab=done`: the rest, latest answered first."""

    items: list[InboxItem]


def inbox_operation(
    operation_class: type[Operation],
    answer_class: type[Answer],
    security: tuple[dict, ...],
    read_answers: dict[int, Answer],
) -> Operation:
    """The OpenAPI registry entry of `GET /api/me/inbox` (built here so the feature keeps its own description)."""
    return operation_class(
        endpoint="inbox.api_inbox",
        method="get",
        path="/api/me/inbox",
        summary="My inbox: connection cards and tool approvals addressed to me in the current company",
        tag="inbox",
        security=security,
        responses={200: answer_class("OK", (InboxResponse,)), **read_answers},
        description="`?tab=open` (the default): pending cards on open tasks, newest first. `?tab=done`: answered, "
        "expired and superseded cards, latest first, with `outcome`, `resolvedAt` and `resolvedByUserId`.",
    )
