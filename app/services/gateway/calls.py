"""A gateway `tools/call`: prepare (policy, approval), reach the provider under its limits, record the outcome."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from flask import current_app

from app.adapters.providers import errors as provider_errors
from app.adapters.providers import limits as provider_limits
from app.adapters.providers import mcp_client
from app.adapters.providers.call_control import CallControl, ProviderCancelled
from app.core import metrics, tracing, wake_signal
from app.core.errors import ServiceError
from app.extensions import db
from app.services.activity import TOOL_CALL_ACTION, record_activity, record_activity_now
from app.services.connections import endpoint, tool_changes
from app.services.connections.shared_breakers import DatabaseBreakers
from app.services.gateway import limits as call_limits
from app.services.gateway import resource_uris
from app.services.gateway.approval_cards import _approval_step
from app.services.gateway.arguments import REDACTED, canonical_digest, project_arguments
from app.services.gateway.names import tool_name_budget
from app.services.gateway.result_limits import cap_result
from app.services.gateway.results import (
    CALL_CANCELLED,
    PROVIDER_BUSY,
    PROVIDER_ERROR,
    PROVIDER_PAUSED,
    PROVIDER_TIMEOUT,
    READ_ONLY_ASSISTANT,
    TOOL_BLOCKED,
    PreparedCall,
    _refusal,
)
from app.services.gateway.targets import ProviderTarget, call_timeout, provider_target
from app.services.gateway.tools import call_target
from app.services.oauth.errors import ReauthorizationRequired
from app.services.runtime.context import is_read_only

if TYPE_CHECKING:
    from app.services.runtime.context import RunContext

__all__ = [
    "ProviderTarget",
    "call_timeout",
    "execute_call",
    "prepare_call",
    "prepare_target",
    "provider_target",
]

ACTIVITY_ACTION = TOOL_CALL_ACTION
TOOLS_JOB = "tools"  # the worker job that re-indexes connections whose provider said its tools changed


def prepare_call(ctx: RunContext, name: str, arguments: dict) -> PreparedCall:
    """Resolve the tool again, apply the action policy and approvals. No provider is contacted here.

    `ctx` is a validated `runtime_tools.RunContext`. The caller commits before `execute_call`, so a consumed
    approval and a new card are durable before the provider is reached. The tool is resolved from plain values
    kept under the access revision read with the run (`gateway.tools.call_target`).
    """
    prepared = PreparedCall(
        started=time.monotonic(),
        run_id=ctx.run.id,
        company_id=ctx.run.company_id,
        agent_id=ctx.agent.id,
        tool_name=name,
        visible_name=name,
    )
    tool = call_target(
        ctx.run, name, ctx.access_revision, tool_name_budget(ctx.agent.adapter_type), ctx.membership
    )
    if tool is None:
        prepared.unknown = True
        prepared.decision = "unknown_tool"
        _record(prepared, outcome="refused")
        return prepared
    prepared.tool_name = tool.tool_name
    prepared.connection_id = tool.connection_id
    prepared.connection_name = tool.connection_name
    prepared.grant_id = tool.grant_id
    prepared.app_definition = tool.app_definition
    prepared.has_output_schema = tool.has_output_schema
    prepared.target = tool
    projected = project_arguments(arguments, tool.managed)
    prepared.arguments = projected
    prepared.arguments_digest = canonical_digest(projected)
    if tool.is_write and is_read_only(ctx.run.context_snapshot):
        prepared.decision = READ_ONLY_ASSISTANT
        prepared.result = _refusal(
            READ_ONLY_ASSISTANT,
            f"{tool.name} changes things, and this assistant was connected read-only. It was not run; do not "
            "retry it.",
        )
    elif tool.action == "block":
        prepared.decision = TOOL_BLOCKED
        prepared.result = _refusal(
            TOOL_BLOCKED,
            f"An administrator blocked {tool.name} for agents on {tool.connection_name}. It was not run; "
            "do not retry it.",
        )
    elif tool.action == "ask_first":
        # Counted before the approval step, so a call over a limit neither opens a card nor uses up an approval;
        # taken off again when it only asks or is denied. An approved call commits before its provider is
        # prepared (GATEWAY_DECISION), which ends this count's write too.
        prepared.result = call_limits.check_call(prepared, tool, tool.call_limits)
        prepared.counted = True
        if prepared.result is None:
            _approval_step(ctx, tool, projected, prepared)
            if prepared.result is not None:
                call_limits.release_call(prepared, tool, tool.call_limits)
    if prepared.result is not None:
        _record(prepared, outcome="refused")
    return prepared


def provider_limits_from_config() -> provider_limits.Limits:
    """This process's bulkhead, and the breaker every process shares (in the database)."""
    config = current_app.config
    return provider_limits.Limits(
        max_concurrent=int(config.get("PROVIDER_MAX_CONCURRENT_CALLS", 4)),
        failure_threshold=int(config.get("PROVIDER_BREAKER_TIMEOUTS", 3)),
        reset_seconds=float(config.get("PROVIDER_BREAKER_SECONDS", 30)),
        shared=DatabaseBreakers(db.engine),
    )


def prepare_target(prepared: PreparedCall) -> ProviderTarget | None:
    """URL and headers to reach the provider as the selected grant (OAuth refreshed first), values to scrub, the
    outbound guard for a member-typed URL, and the call timeout.

    Reads only (an OAuth refresh commits in a unit of work of its own): the connection with its identity and the
    identity's credentials in one statement (read again after an OAuth refresh). The caller ends the transaction
    before `execute_call`, so no database connection is held while the provider works. When the connection can no
    longer be called, `prepared.result` is set to the refusal (and recorded) and None is returned.

    Last, an allowed call is counted against the connection's rate limits and loop breaker (`gateway.limits`, one
    statement; an ask-first call was counted by `prepare_call`): after any OAuth refresh, so on SQLite that refresh
    never waits for this request's write lock, and just before the caller's commit, so the counters stay locked
    only briefly. A call over a limit is refused (`rate_limited`, `loop_detected`), recorded, and None is returned.
    """
    try:
        if (
            prepared.connection_id is None or prepared.grant_id is None or prepared.target is None
        ):  # set by prepare_call for a ready call
            raise ServiceError("The connection is no longer available to this agent.")
        target = provider_target(prepared.connection_id, prepared.grant_id, prepared.app_definition)
    except ServiceError as err:
        db.session.rollback()
        prepared.needs_person = isinstance(err, ReauthorizationRequired)
        prepared.result = _refusal(PROVIDER_ERROR, err.message)
        _record(prepared, outcome=PROVIDER_ERROR)
        return None
    refusal = (
        None
        if prepared.counted
        else call_limits.check_call(prepared, prepared.target, prepared.target.call_limits)
    )
    if refusal is not None:
        prepared.result = refusal
        _record(prepared, outcome="refused")
        return None
    return target


def scrub(value: Any, secrets: list[str]) -> Any:
    if not secrets:
        return value
    if isinstance(value, str):
        for secret in secrets:
            value = value.replace(secret, REDACTED)
        return value
    if isinstance(value, dict):  # the same kind of dict: a `Refusal` stays one (`results.for_the_tool`)
        return type(value)({k: scrub(v, secrets) for k, v in value.items()})
    if isinstance(value, list):
        return [scrub(v, secrets) for v in value]
    return value


def _provider_failure(prepared: PreparedCall, err: provider_errors.ProviderError) -> tuple[str, dict]:
    """The outcome code and the isError result for a call the provider did not complete."""
    name = prepared.connection_name
    if isinstance(err, ProviderCancelled):
        return CALL_CANCELLED, _refusal(
            CALL_CANCELLED,
            f"The call to {name} was cancelled; {name} was told to stop. It may have partly run at the provider.",
        )
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
    if isinstance(err, provider_errors.ProviderToolError) and err.code is not None:
        # The provider answered with a JSON-RPC error: its code and words (shortened, no credentials) for the agent.
        return PROVIDER_ERROR, _refusal(
            PROVIDER_ERROR,
            f"The call to {name} failed: {err.message}",
            providerError={"code": err.code, "message": err.said},
        )
    return PROVIDER_ERROR, _refusal(PROVIDER_ERROR, f"The call to {name} failed: {err.message}")


def execute_call(prepared: PreparedCall, target: ProviderTarget, control: CallControl | None = None) -> dict:
    """Call the provider through its bulkhead and breaker, with the call timeout; failures become isError results.

    The provider's result passes through as it said it (`content`, `structuredContent`, `isError`, `_meta`), with
    stored credentials scrubbed and `resource_link` URIs namespaced for the agent (`resource_uris`). `control` relays progress and lets the agent cancel (`call_control`). Touches the
    database only to record the outcome afterwards.
    """
    with tracing.provider_call_span(prepared.tool_name, target.url, prepared.connection_id) as span:
        try:
            raw = mcp_client.call_tool(
                target.url,
                headers=target.headers,
                tool_name=prepared.tool_name,
                arguments=prepared.arguments,
                timeout=target.timeout,
                guard=target.guard,
                limits=provider_limits_from_config(),
                control=control,
                transport=target.transport,
                max_response_bytes=endpoint.max_response_bytes(),
            )
        except provider_errors.ProviderError as err:
            outcome, result = _provider_failure(prepared, err)
            tracing.mark_failed(span, outcome)
            _record(prepared, outcome=outcome, now=True)
            return scrub(result, target.scrub)
        if raw.get("isError"):
            tracing.mark_failed(span, "tool_error")
    if prepared.connection_id is not None and tool_changes.take_tools_changed(target.url):
        # The provider said notifications/tools/list_changed meanwhile: the worker re-indexes the connection.
        tool_changes.mark_tools_changed(prepared.connection_id)
        wake_signal.nudge(TOOLS_JOB)
    result = {"content": raw.get("content") or [], "isError": bool(raw.get("isError"))}
    if raw.get("structuredContent") is not None:
        result["structuredContent"] = raw["structuredContent"]
    if raw.get("_meta"):
        result["_meta"] = raw["_meta"]
    result = cap_result(scrub(result, target.scrub), int(current_app.config["GATEWAY_RESULT_MAX_CHARS"]))
    if prepared.connection_id is not None:
        result = resource_uris.namespace_links(
            result, prepared.company_id, prepared.agent_id, prepared.connection_id
        )
    _record(prepared, outcome="tool_error" if result["isError"] else "ok", now=True, result=result)
    return result


def _record(prepared: PreparedCall, *, outcome: str, now: bool = False, result: dict | None = None) -> None:
    """The call's activity row: in the request's transaction, or (`now`, once the provider has answered and the
    request holds no transaction) committed at once in one statement. It is the call's entry in the run's decision
    timeline (`gateway.timeline`), so it carries the digests of the projected arguments and of the provider's
    result, never either of them."""
    seconds = time.monotonic() - prepared.started
    duration_ms = int(seconds * 1000)
    metrics.observe_gateway_call(prepared.connection_id, outcome, seconds)
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
    if prepared.arguments_digest:
        details["argumentsDigest"] = prepared.arguments_digest
    if result is not None:
        details["resultDigest"] = canonical_digest(result)
    if prepared.trust_rule_id is not None:
        details["trustRuleId"] = str(prepared.trust_rule_id)
    if prepared.result is not None and isinstance(prepared.result.get("structuredContent"), dict):
        retry_after = prepared.result["structuredContent"].get("retryAfterSeconds")
        if isinstance(retry_after, int):
            details["retryAfterSeconds"] = retry_after
    (record_activity_now if now else record_activity)(
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
