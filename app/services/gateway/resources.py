"""A gateway `resources/read`: the agent opens what a provider's tool result pointed it at.

Only URIs the gateway handed this agent are read (`resource_uris`: namespaced per connection, tagged for the
agent), and only while the agent may call tools of that connection (`access/effective.connection_access(...).is_ready`,
the predicate a tool call asks). Anything else is "Resource not found", whatever the reason, so a probe learns nothing. The read
reaches the provider as a tool call does (`calls.provider_target`, then `provider_resources.read_resource` on the
pooled session, under the provider's bulkhead and timeout); its contents come back as the provider said them, with
stored credentials scrubbed and each content URI namespaced again. Every read that reaches the provider writes a
`tool_gateway.resource_read` activity row (connection, run, outcome, duration; never the URI or the contents).

Like tool calls, reading is split in two so the caller can end the transaction in between: `prepare_read` (database
reads), then `execute_read` (the provider; touches the database only to record the outcome).
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from app.adapters.providers import errors as provider_errors
from app.adapters.providers import resources as provider_resources
from app.core.errors import ServiceError
from app.services.access.effective import connection_access
from app.services.activity import record_activity
from app.services.connections import endpoint
from app.services.gateway import calls, resource_uris
from app.services.gateway.results import PROVIDER_ERROR
from app.services.runtime.context import RunContext

ACTIVITY_ACTION = "tool_gateway.resource_read"
NOT_FOUND = "Resource not found"


class ResourceNotFound(Exception):
    """Not a URI the gateway handed this agent, or its connection is not the agent's to use now."""


class ResourceReadFailed(Exception):
    """The provider could not be read: `code` is the provider's JSON-RPC code, or -32603 when it did not answer."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code
        self.message = message


INTERNAL_ERROR = -32603


@dataclass(frozen=True)
class PreparedRead:
    started: float
    company_id: uuid.UUID
    agent_id: uuid.UUID
    run_id: uuid.UUID
    connection_id: uuid.UUID
    connection_name: str
    provider_uri: str
    target: calls.ProviderTarget


def prepare_read(ctx: RunContext, uri: str) -> PreparedRead:
    """Check the URI and the agent's access to its connection now, and find the provider. Raises ResourceNotFound,
    or ResourceReadFailed when the connection cannot be reached any more."""
    run = ctx.run
    ref = resource_uris.parse(uri)
    if ref is None or not resource_uris.issued_to(ref, run.company_id, run.agent_id):
        raise ResourceNotFound()
    access = connection_access(run.company_id, run.agent_id, run.responsible_user_id, ref.connection_id)
    if access is None or not access.is_ready or access.grant is None:
        raise ResourceNotFound()
    try:
        target = calls.provider_target(access.connection.id, access.grant.id)
    except ServiceError as err:
        raise ResourceReadFailed(INTERNAL_ERROR, err.message) from None
    return PreparedRead(
        started=time.monotonic(),
        company_id=run.company_id,
        agent_id=run.agent_id,
        run_id=run.id,
        connection_id=access.connection.id,
        connection_name=access.connection.name,
        provider_uri=ref.provider_uri,
        target=target,
    )


def execute_read(prepared: PreparedRead) -> dict:
    """Read at the provider; the `resources/read` result for the agent. Raises ResourceReadFailed."""
    target = prepared.target
    try:
        raw = provider_resources.read_resource(
            target.url,
            headers=target.headers,
            uri=prepared.provider_uri,
            timeout=target.timeout,
            guard=target.guard,
            limits=calls.provider_limits_from_config(),
            transport=target.transport,
            max_response_bytes=endpoint.max_response_bytes(),
        )
    except provider_resources.ProviderRefused as refused:
        _record(prepared, "refused_by_provider")
        raise ResourceReadFailed(refused.code, calls.scrub(refused.message, target.scrub)) from None
    except provider_errors.ProviderError as err:
        _record(prepared, PROVIDER_ERROR)
        raise ResourceReadFailed(
            INTERNAL_ERROR, f"The read from {prepared.connection_name} failed: {err.message}"
        ) from None
    result = calls.scrub(raw, target.scrub)
    contents = result.get("contents")
    if isinstance(contents, list):
        result["contents"] = [_namespaced(prepared, item) for item in contents]
    _record(prepared, "ok")
    return result


def _namespaced(prepared: PreparedRead, item: Any) -> Any:
    if not isinstance(item, dict) or not isinstance(item.get("uri"), str):
        return item
    uri = resource_uris.namespaced(
        prepared.company_id, prepared.agent_id, prepared.connection_id, item["uri"]
    )
    return {**item, "uri": uri}


def _record(prepared: PreparedRead, outcome: str) -> None:
    record_activity(
        company_id=prepared.company_id,
        actor_type="agent",
        actor_id=prepared.agent_id,
        action=ACTIVITY_ACTION,
        entity_type="tool_connection",
        entity_id=prepared.connection_id,
        agent_id=prepared.agent_id,
        run_id=prepared.run_id,
        details={
            "connectionId": str(prepared.connection_id),
            "connectionName": prepared.connection_name,
            "runId": str(prepared.run_id),
            "outcome": outcome,
            "durationMs": int((time.monotonic() - prepared.started) * 1000),
        },
    )
