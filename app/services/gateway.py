"""The tool gateway: agents call the tools of their granted connections through Switchboard.

Listing and calling both ask the one access service (`effective_access`) for the run's stored company, agent
and responsible person on every request, so a revoked grant, a removed install or a new block policy takes
effect on the next `tools/list` and refuses the next `tools/call`. Nothing here trusts the agent's view of
which connection a tool belongs to: the visible name is looked up again in a freshly built map.

Visible names. A tool is shown as `<connection-slug>__<tool>`: the slug is the connection's name lowercased,
every run of characters other than `a-z0-9` turned into one `-`, trimmed and capped at 32 characters
(`connection` when nothing is left). When two connections the agent can see share a slug, each of them gets
`-<first 8 hex of its id>` appended, so names never collide and only change when a same-named connection
appears. A name longer than 128 characters keeps its first part and ends in `-<8 hex of a hash of the tool
name>`. Blocked tools are never listed (but a call naming one is still refused with a denial, never
forwarded).

Action policy. `allow` runs; `block` answers an isError result naming the denial (`tool_blocked`); `ask_first`
puts one `tool_approval` card in the task thread addressed to the run's responsible person and answers isError
`approval_required` with the approval id. Once approved, exactly one retry with the same projected arguments
runs (the card is consumed atomically); the next identical call needs a new approval. A denial refuses the
same call for the rest of the run (`approval_denied`).

Managed arguments. A connection's public tenant configuration can pin tool arguments: the Honcho workspace
(`config.methodConfig.workspaceId`) becomes the `workspace_id` argument of every tool that declares one. The
value is applied after the caller's arguments (a forged value is overwritten) and the argument is removed from
the visible schema (`properties` and `required`). Without a configured value the caller's argument passes
through. Which tenant field pins which argument comes from the field's `toolArgument` in the app definition.
Approvals store a digest of the projected arguments and are compared against the current projection, so
changing the workspace invalidates an approved call (`approved_tool_target_changed`, the provider is never
called).

Provider limits. A call that reaches the provider takes a slot in the provider's bulkhead and passes its circuit
breaker (`provider_limits`): a full bulkhead answers isError `provider_busy` and an open breaker `provider_paused`
at once, without contacting the provider; a call that outlives its timeout (the app definition's
`callTimeoutSeconds`, else `PROVIDER_CALL_TIMEOUT_SECONDS`) answers `provider_timeout`. No database connection is
held while the provider works.

Activity. Every call writes `tool_gateway.call` (tool, connection, run, decision, duration in ms); arguments
and credentials are never written.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from flask import current_app
from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from app.catalog.loader import get_apps, get_method
from app.core.errors import ServiceError
from app.extensions import db
from app.models import ConnectionGrant, HeartbeatRun, ThreadInteraction, ToolConnection
from app.models.base import utcnow
from app.services.access.effective import ConnectionAccess, ToolAccess, effective_access
from app.services.access.revision import RevisionCache
from app.services.activity import SECRET_KEY_HINTS, record_activity
from app.services.connections import endpoint as connection_service
from app.services.connections import provider_errors, provider_limits
from app.services.connections import provider_mcp as provider_mcp
from app.services.intents.creation import record_card_created

SERVER_NAME = "switchboard-tool-gateway"
KIND = "tool_approval"
ACTIVITY_ACTION = "tool_gateway.call"
NAME_SEPARATOR = "__"
SLUG_MAX_LENGTH = 32
NAME_MAX_LENGTH = 128
DEFAULT_CALL_TIMEOUT = 30.0
REDACTED = "[redacted]"

# Card statuses: pending -> approved -> consumed; pending -> denied; pending/approved -> invalidated.
PENDING, APPROVED, DENIED, CONSUMED, INVALIDATED = "pending", "approved", "denied", "consumed", "invalidated"

APPROVAL_REQUIRED = "approval_required"
APPROVAL_DENIED = "approval_denied"
TARGET_CHANGED = "approved_tool_target_changed"
TOOL_BLOCKED = "tool_blocked"
PROVIDER_ERROR = "provider_error"
PROVIDER_BUSY = "provider_busy"
PROVIDER_PAUSED = "provider_paused"
PROVIDER_TIMEOUT = "provider_timeout"


# --- naming ------------------------------------------------------------------------------------------------------


def connection_slug(name: str) -> str:
    """The stable, name-safe slug of a connection name (see the module docstring)."""
    slug = re.sub(r"[^a-z0-9]+", "-", (name or "").lower()).strip("-")
    slug = slug[:SLUG_MAX_LENGTH].rstrip("-")
    return slug or "connection"


def visible_name(slug: str, tool_name: str) -> str:
    name = f"{slug}{NAME_SEPARATOR}{tool_name}"
    if len(name) <= NAME_MAX_LENGTH:
        return name
    suffix = "-" + hashlib.sha256(tool_name.encode()).hexdigest()[:8]
    return name[: NAME_MAX_LENGTH - len(suffix)] + suffix


def _slugs(connections: list[ToolConnection]) -> dict[uuid.UUID, str]:
    base = {c.id: connection_slug(c.name) for c in connections}
    counts: dict[str, int] = {}
    for slug in base.values():
        counts[slug] = counts.get(slug, 0) + 1
    return {cid: (slug if counts[slug] == 1 else f"{slug}-{cid.hex[:8]}") for cid, slug in base.items()}


# --- managed arguments and schemas -------------------------------------------------------------------------------


def managed_arguments(
    connection: ToolConnection, app_definition, input_schema: dict | None
) -> dict[str, Any]:
    """Arguments pinned by the connection's public configuration for a tool with this schema."""
    if app_definition is None:
        return {}
    method = get_method(app_definition, connection.method_key)
    if method is None:
        return {}
    properties = (input_schema or {}).get("properties") or {}
    values = connection.method_config
    managed: dict[str, Any] = {}
    for tenant_field in method.tenantFields:
        if not tenant_field.is_public:
            continue
        argument = tenant_field.toolArgument
        value = values.get(tenant_field.key)
        if isinstance(value, str):
            value = value.strip()
        if argument and argument in properties and value not in (None, ""):
            managed[argument] = value
    return managed


def project_schema(input_schema: dict | None, managed: dict[str, Any]) -> dict:
    """The agent-visible schema: managed arguments removed from `properties` and `required`.

    Copies only the levels it changes (a listing projects thousands of schemas); nested values are shared with
    the stored schema and never modified.
    """
    schema = dict(input_schema or {}) or {"type": "object", "properties": {}}
    schema.setdefault("type", "object")
    if managed:
        properties = schema.get("properties")
        if isinstance(properties, dict):
            schema["properties"] = {k: v for k, v in properties.items() if k not in managed}
        required = schema.get("required")
        if isinstance(required, list):
            schema["required"] = [r for r in required if r not in managed]
            if not schema["required"]:
                del schema["required"]
    return schema


def project_arguments(arguments: dict, managed: dict[str, Any]) -> dict:
    """The arguments the provider receives: the caller's, then the managed values on top."""
    return {**arguments, **managed}


def _looks_secret(key: str) -> bool:
    lowered = str(key).lower().replace("-", "_")
    return any(h in lowered for h in SECRET_KEY_HINTS) and not lowered.endswith(("_id", "_count"))


def secret_argument_names(input_schema: dict | None) -> set[str]:
    """Top-level arguments the schema marks secret (`format: password`, `writeOnly`) or whose names say so."""
    properties = (input_schema or {}).get("properties") or {}
    names = set()
    for key, prop in properties.items():
        prop = prop if isinstance(prop, dict) else {}
        if prop.get("format") == "password" or prop.get("writeOnly") is True or _looks_secret(key):
            names.add(key)
    return names


def redact_arguments(arguments: dict, input_schema: dict | None) -> dict:
    """A copy safe to show people: secret-marked values (and nested secret-named keys) replaced."""
    secret = secret_argument_names(input_schema)

    def walk(value, key=None):
        if key is not None and (key in secret or _looks_secret(key)):
            return REDACTED
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return {k: walk(v, k) for k, v in arguments.items()}


def canonical_digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()


# --- the visible tool map ----------------------------------------------------------------------------------------


@dataclass
class GatewayTool:
    name: str
    access: ConnectionAccess
    tool_access: ToolAccess
    app_definition: Any
    managed: dict[str, Any] = field(default_factory=dict)

    @property
    def connection(self) -> ToolConnection:
        return self.access.connection

    @property
    def action(self) -> str:
        return self.tool_access.action

    def definition(self) -> dict:
        tool = self.tool_access.tool
        description = (tool.description or "").strip()
        note = f"Tool {tool.name} of the connection {self.connection.name}."
        if self.action == "ask_first":
            note += " Each call needs approval by the task's responsible person before it runs."
        return {
            "name": self.name,
            "description": f"{description}\n\n{note}" if description else note,
            "inputSchema": project_schema(tool.input_schema, self.managed),
            # MCP tool annotations, so agents can tell reads from writes without guessing from names.
            "annotations": {"readOnlyHint": not tool.is_write},
        }


def _usable(accesses: list) -> list:
    """Connections the agent may call now: an active identity on a healthy connection."""
    return [a for a in accesses if a.grant is not None and a.grant.status == "active" and a.is_healthy]


def _tools_of(accesses: list, slugs: dict[uuid.UUID, str], include_blocked: bool) -> dict[str, GatewayTool]:
    apps = get_apps(a.connection.app_slug for a in accesses)
    tools: dict[str, GatewayTool] = {}
    for access in accesses:
        if access.connection.id not in slugs:
            continue  # became usable between the two reads of `find_tool`: not listed yet, so not callable
        app_definition = apps.get(access.connection.app_slug)
        for tool_access in access.tools:
            if tool_access.action == "block" and not include_blocked:
                continue
            name = visible_name(slugs[access.connection.id], tool_access.tool.name)
            tools[name] = GatewayTool(
                name=name,
                access=access,
                tool_access=tool_access,
                app_definition=app_definition,
                managed=managed_arguments(access.connection, app_definition, tool_access.tool.input_schema),
            )
    return tools


def tool_map(run: HeartbeatRun) -> dict[str, GatewayTool]:
    """Every tool the run's agent may use now (blocked ones left out), by visible name (constant queries)."""
    accesses = _usable(effective_access(run.company_id, run.agent_id, run.responsible_user_id))
    if not accesses:
        return {}
    return _tools_of(accesses, _slugs([a.connection for a in accesses]), include_blocked=False)


def find_tool(run: HeartbeatRun, name: str) -> GatewayTool | None:
    """One tool by visible name, blocked ones included, as `tool_map` would name it.

    An agent may have thousands of tools; a call reads the tool rows of the one connection its name points to.
    Connection slugs depend on every usable connection's name (duplicates get a suffix), so those come first,
    from tool counts alone.
    """
    usable = _usable(
        effective_access(run.company_id, run.agent_id, run.responsible_user_id, with_tools=False)
    )
    slugs = _slugs([a.connection for a in usable])
    prefix = name.split(NAME_SEPARATOR, 1)[0]
    ids = [connection_id for connection_id, slug in slugs.items() if slug == prefix]
    if not ids:
        return None
    accesses = _usable(
        effective_access(run.company_id, run.agent_id, run.responsible_user_id, connection_ids=ids)
    )
    return _tools_of(accesses, slugs, include_blocked=True).get(name)


# Listings are large (an agent may have thousands of tools), so a process keeps fewer of them than search indexes.
LISTING_CACHE_SIZE = 32
_listings: RevisionCache[list[dict]] = RevisionCache(LISTING_CACHE_SIZE)


def list_tool_definitions(run: HeartbeatRun, access_revision: int) -> list[dict]:
    """The MCP `tools/list` answer for this run: allowed and ask-first tools, blocked ones left out.

    Kept per audience while the company's access revision is unchanged: the listing depends only on
    connections, identities, installs, tools, policies and the catalog, whose writes all raise it. Callers
    serialize the definitions and never modify them.
    """
    return _listings.get_or_build(
        (run.company_id, run.agent_id, run.responsible_user_id),
        access_revision,
        lambda: [tool.definition() for tool in tool_map(run).values()],
    )


def clear_listings() -> None:
    _listings.clear()


# --- calling -----------------------------------------------------------------------------------------------------


@dataclass
class PreparedCall:
    """The outcome of the policy step: either a final `result` or what `execute_call` needs (plain values)."""

    started: float
    run_id: uuid.UUID
    company_id: uuid.UUID
    agent_id: uuid.UUID
    tool_name: str
    visible_name: str
    connection_id: uuid.UUID | None = None
    connection_name: str | None = None
    grant_id: uuid.UUID | None = None
    arguments: dict = field(default_factory=dict)
    decision: str = "allowed"
    approval_id: uuid.UUID | None = None
    result: dict | None = None
    unknown: bool = False

    @property
    def ready(self) -> bool:
        return self.result is None and not self.unknown


def _refusal(reason_code: str, message: str, **extra) -> dict:
    structured = {"reasonCode": reason_code, "message": message, **extra}
    return {
        "content": [{"type": "text", "text": f"{reason_code}: {message}"}],
        "structuredContent": structured,
        "isError": True,
    }


def _call_key(agent_id: uuid.UUID, tool: GatewayTool, projected: dict) -> str:
    """What makes two calls "the same" for approvals: agent, connection, tool, caller-controlled arguments."""
    unmanaged = {k: v for k, v in projected.items() if k not in tool.managed}
    digest = canonical_digest(
        {
            "agent": str(agent_id),
            "connection": str(tool.connection.id),
            "tool": tool.tool_access.tool.name,
            "arguments": unmanaged,
        }
    )
    return f"tool-approval:{digest}"


def _cards(issue_id: uuid.UUID, company_id: uuid.UUID, key: str) -> list[ThreadInteraction]:
    return list(
        db.session.scalars(
            select(ThreadInteraction)
            .where(
                ThreadInteraction.company_id == company_id,
                ThreadInteraction.issue_id == issue_id,
                ThreadInteraction.kind == KIND,
                ThreadInteraction.idempotency_key == key,
                ThreadInteraction.status.in_((PENDING, APPROVED, DENIED)),
            )
            .order_by(ThreadInteraction.created_at.desc())
        )
    )


def invalidate_card(card: ThreadInteraction, reason_code: str) -> None:
    card.status = INVALIDATED
    card.result = {"reasonCode": reason_code, "at": utcnow().isoformat()}
    card.resolved_at = card.resolved_at or utcnow()


def consume_card(card: ThreadInteraction) -> bool:
    """Atomically move an approved card to consumed; False when another call consumed it first."""
    consumed_at = utcnow()
    outcome = db.session.execute(
        update(ThreadInteraction)
        .where(ThreadInteraction.id == card.id, ThreadInteraction.status == APPROVED)
        .values(status=CONSUMED, updated_at=consumed_at)
        .execution_options(synchronize_session=False)
    )
    db.session.expire(card)
    return outcome.rowcount == 1


def _create_card(ctx, tool: GatewayTool, key: str, projected: dict) -> ThreadInteraction:
    raw_tool = tool.tool_access.tool
    title = f"Approve {raw_tool.name} on {tool.connection.name}?"[:300]
    card = ThreadInteraction(
        company_id=ctx.run.company_id,
        issue_id=ctx.issue.id,
        kind=KIND,
        status=PENDING,
        title=title,
        summary=f"{ctx.agent.name} wants to call {raw_tool.name} on {tool.connection.name}.",
        payload={
            "version": 1,
            "connectionId": str(tool.connection.id),
            "connectionName": tool.connection.name,
            "toolName": raw_tool.name,
            "visibleToolName": tool.name,
            "isWrite": bool(raw_tool.is_write),
            "arguments": redact_arguments(projected, raw_tool.input_schema),
            "managedArguments": dict(tool.managed),
            "argumentsDigest": canonical_digest(projected),
            "requestingAgentId": str(ctx.agent.id),
            "requestingAgentName": ctx.agent.name,
        },
        idempotency_key=key,
        addressee_user_id=ctx.responsible_user_id,
        requesting_agent_id=ctx.agent.id,
        source_run_id=ctx.run.id,
    )
    try:
        with db.session.begin_nested():
            db.session.add(card)
            db.session.flush()
    except IntegrityError:
        # Another call inserted the same pending key first: the database decided, so use its row.
        winner = next((c for c in _cards(ctx.issue.id, ctx.run.company_id, key) if c.status == PENDING), None)
        if winner is None:
            raise
        return winner
    record_card_created(
        company_id=ctx.run.company_id,
        agent_id=ctx.agent.id,
        issue_id=ctx.issue.id,
        run_id=ctx.run.id,
        interaction_id=card.id,
        kind=KIND,
        purpose="tool_approval",
    )
    return card


def _approval_step(ctx, tool: GatewayTool, projected: dict, prepared: PreparedCall) -> None:
    """Ask-first policy: consume a matching approval, or point at (or create) the one pending card."""
    key = _call_key(ctx.agent.id, tool, projected)
    digest = canonical_digest(projected)
    cards = _cards(ctx.issue.id, ctx.run.company_id, key)
    for card in (c for c in cards if c.status == APPROVED):
        prepared.approval_id = card.id
        if (card.payload or {}).get("argumentsDigest") != digest:
            invalidate_card(card, TARGET_CHANGED)
            prepared.decision = TARGET_CHANGED
            prepared.result = _refusal(
                TARGET_CHANGED,
                "The approved call no longer matches this connection's current configuration (for example its "
                "workspace changed), so it was not run. Call the tool again to ask for a new approval.",
                approvalId=str(card.id),
            )
            return
        if consume_card(card):
            prepared.decision = "approved"
            return
    pending = next((c for c in cards if c.status == PENDING), None)
    if pending is not None and (
        (pending.payload or {}).get("argumentsDigest") != digest
        or pending.addressee_user_id != ctx.responsible_user_id
    ):
        invalidate_card(pending, TARGET_CHANGED)
        db.session.flush()
        pending = None
    if pending is None:
        denied = next((c for c in cards if c.status == DENIED and c.source_run_id == ctx.run.id), None)
        if denied is not None and (not cards or cards[0] is denied):
            prepared.decision = APPROVAL_DENIED
            prepared.approval_id = denied.id
            prepared.result = _refusal(
                APPROVAL_DENIED,
                f"The responsible person denied this call of {tool.name}. Do not retry it in this run; "
                "pursue alternatives or explain what you could not do.",
                approvalId=str(denied.id),
            )
            return
        pending = _create_card(ctx, tool, key, projected)
    prepared.decision = APPROVAL_REQUIRED
    prepared.approval_id = pending.id
    prepared.result = _refusal(
        APPROVAL_REQUIRED,
        f"{tool.name} needs approval by the responsible person. An approval card was sent in the task thread "
        f"(approval id {pending.id}). Finish independent work; once it is approved, retry the same call with the "
        "same arguments (it runs once).",
        approvalId=str(pending.id),
    )


def prepare_call(ctx, name: str, arguments: dict) -> PreparedCall:
    """Resolve the tool again, apply the action policy and approvals. No provider is contacted here.

    `ctx` is a validated `runtime_tools.RunContext`. The caller commits before `execute_call`, so a consumed
    approval and a new card are durable before the provider is reached.
    """
    prepared = PreparedCall(
        started=time.monotonic(),
        run_id=ctx.run.id,
        company_id=ctx.run.company_id,
        agent_id=ctx.agent.id,
        tool_name=name,
        visible_name=name,
    )
    tool = find_tool(ctx.run, name)
    if tool is None:
        prepared.unknown = True
        prepared.decision = "unknown_tool"
        _record(prepared, outcome="refused")
        return prepared
    prepared.tool_name = tool.tool_access.tool.name
    prepared.connection_id = tool.connection.id
    prepared.connection_name = tool.connection.name
    prepared.grant_id = tool.access.grant.id
    projected = project_arguments(arguments, tool.managed)
    prepared.arguments = projected
    if tool.action == "block":
        prepared.decision = TOOL_BLOCKED
        prepared.result = _refusal(
            TOOL_BLOCKED,
            f"An administrator blocked {tool.name} for agents on {tool.connection.name}. It was not run; "
            "do not retry it.",
        )
    elif tool.action == "ask_first":
        _approval_step(ctx, tool, projected, prepared)
    if prepared.result is not None:
        _record(prepared, outcome="refused")
    return prepared


@dataclass(frozen=True)
class ProviderTarget:
    """Where and how to reach the provider for one prepared call (plain values: no database object)."""

    url: str
    headers: dict
    scrub: list[str]
    guard: frozenset[str] | None
    timeout: float


def call_timeout(app_definition) -> float:
    """The call timeout: the app definition's `callTimeoutSeconds`, else `PROVIDER_CALL_TIMEOUT_SECONDS`."""
    own = getattr(app_definition, "callTimeoutSeconds", None)
    return float(own or current_app.config.get("PROVIDER_CALL_TIMEOUT_SECONDS", DEFAULT_CALL_TIMEOUT))


def provider_limits_from_config() -> provider_limits.Limits:
    config = current_app.config
    return provider_limits.Limits(
        max_concurrent=int(config.get("PROVIDER_MAX_CONCURRENT_CALLS", 4)),
        failure_threshold=int(config.get("PROVIDER_BREAKER_TIMEOUTS", 3)),
        reset_seconds=float(config.get("PROVIDER_BREAKER_SECONDS", 30)),
    )


def prepare_target(prepared: PreparedCall) -> ProviderTarget | None:
    """URL and headers to reach the provider as the selected grant (OAuth refreshed first), values to scrub, the
    outbound guard for a member-typed URL, and the call timeout.

    Reads only (an OAuth refresh commits in a unit of work of its own). The caller ends the transaction before
    `execute_call`, so no database connection is held while the provider works. When the connection can no longer
    be called, `prepared.result` is set to the refusal (and recorded) and None is returned.
    """
    from app.catalog.loader import get_app
    from app.services.oauth import tokens as oauth

    try:
        connection = db.session.get(ToolConnection, prepared.connection_id)
        grant = db.session.get(ConnectionGrant, prepared.grant_id)
        if connection is None or grant is None or grant.status != "active":
            raise ServiceError("The connection is no longer available to this agent.")
        app_definition = get_app(connection.app_slug)
        method = get_method(app_definition, connection.method_key) if app_definition else None
        if method is None:
            raise ServiceError("The connection's app is no longer in the catalog.")
        access_token = oauth.get_valid_access_token(connection, grant) if method.auth == "oauth" else None
        secrets = connection_service.stored_secrets(grant)
        try:
            url, headers = connection_service.connection_endpoint(connection, app_definition, grant)
        except ValueError:
            raise ServiceError(
                "The stored credential cannot be sent to the provider; reconnect it."
            ) from None
    except ServiceError as err:
        db.session.rollback()
        prepared.result = _refusal(PROVIDER_ERROR, err.message)
        _record(prepared, outcome=PROVIDER_ERROR)
        return None
    if access_token:
        headers = {**headers, "Authorization": f"Bearer {access_token}"}
    scrub = [v for v in [*secrets.values(), access_token or ""] if isinstance(v, str) and len(v) >= 6]
    return ProviderTarget(
        url=url,
        headers=headers,
        scrub=scrub,
        guard=connection_service.provider_guard(connection, method, secrets),
        timeout=call_timeout(app_definition),
    )


def _scrub(value, secrets: list[str]):
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):
        return {k: _scrub(v, secrets) for k, v in value.items()}
    if isinstance(value, list):
        return [_scrub(v, secrets) for v in value]
    return value


def _provider_failure(prepared: PreparedCall, err: provider_errors.ProviderError) -> tuple[str, dict]:
    """The outcome code and the isError result for a call the provider did not complete."""
    name = prepared.connection_name
    if isinstance(err, provider_errors.ProviderBusy):
        return PROVIDER_BUSY, _refusal(
            PROVIDER_BUSY,
            f"{name} is busy: {err.limit} calls to it are already in progress. It was not called; "
            "try again shortly.",
        )
    if isinstance(err, provider_errors.ProviderPaused):
        return PROVIDER_PAUSED, _refusal(
            PROVIDER_PAUSED,
            f"{name} did not answer the last {err.timeouts} calls in time, so calls to it are paused. It was not "
            f"called; try again in {err.retry_after_seconds} seconds.",
            retryAfterSeconds=err.retry_after_seconds,
        )
    if isinstance(err, provider_errors.ProviderTimeout):
        return PROVIDER_TIMEOUT, _refusal(
            PROVIDER_TIMEOUT,
            f"{name} did not answer within {err.seconds:g} seconds, so Switchboard stopped waiting. The tool may "
            "still have run at the provider: check before repeating a change.",
        )
    return PROVIDER_ERROR, _refusal(PROVIDER_ERROR, f"The call to {name} failed: {err.message}")


def execute_call(prepared: PreparedCall, target: ProviderTarget) -> dict:
    """Call the provider through its bulkhead and breaker, with the call timeout; failures become isError results.

    Touches the database only to record the outcome afterwards.
    """
    try:
        raw = provider_mcp.call_tool(
            target.url,
            headers=target.headers,
            tool_name=prepared.tool_name,
            arguments=prepared.arguments,
            timeout=target.timeout,
            guard=target.guard,
            limits=provider_limits_from_config(),
        )
    except provider_errors.ProviderError as err:
        outcome, result = _provider_failure(prepared, err)
        _record(prepared, outcome=outcome)
        return result
    result: dict = {"content": raw.get("content") or [], "isError": bool(raw.get("isError"))}
    if raw.get("structuredContent") is not None:
        result["structuredContent"] = raw["structuredContent"]
    result = _scrub(result, target.scrub)
    _record(prepared, outcome="tool_error" if result["isError"] else "ok")
    return result


def _record(prepared: PreparedCall, *, outcome: str) -> None:
    duration_ms = int((time.monotonic() - prepared.started) * 1000)
    details = {
        "tool": prepared.visible_name[:200],
        "toolName": prepared.tool_name[:200],
        "connectionId": str(prepared.connection_id) if prepared.connection_id else None,
        "connectionName": prepared.connection_name,
        "runId": str(prepared.run_id),
        "decision": prepared.decision,
        "outcome": outcome,
        "durationMs": duration_ms,
    }
    if prepared.approval_id is not None:
        details["approvalId"] = str(prepared.approval_id)
    record_activity(
        company_id=prepared.company_id,
        actor_type="agent",
        actor_id=prepared.agent_id,
        action=ACTIVITY_ACTION,
        entity_type="tool_connection" if prepared.connection_id else "heartbeat_run",
        entity_id=prepared.connection_id or prepared.run_id,
        agent_id=prepared.agent_id,
        run_id=prepared.run_id,
        details=details,
    )
