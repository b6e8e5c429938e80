"""Response models of the notification JSON routes: what `GET /api/me/inbox` sends, and what its document says."""

from __future__ import annotations

import uuid
from typing import Literal

from pydantic import BaseModel

from app.web.openapi.responses import Moment


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
    createdAt: Moment
    outcome: str | None = None
    resolvedAt: Moment | None = None
    resolvedByUserId: uuid.UUID | None = None


class InboxResponse(BaseModel):
    """`tab=open` (default): pending cards on open tasks, newest first; `tab=done`: the rest, latest answered first."""

    items: list[InboxItem]
