"""OpenTelemetry tracing (issue 31 item 10): off unless `SWITCHBOARD_TRACING` says where spans go.

Spans follow the OpenTelemetry MCP and GenAI semantic conventions: one SERVER span per MCP request on the agent doors
(`{mcp.method.name} {target}`, with `mcp.method.name`, `jsonrpc.request.id`, `mcp.protocol.version`, and for
`tools/call` `gen_ai.operation.name = execute_tool` and `gen_ai.tool.name`), continuing the caller's trace from the
request's `params._meta` (SEP-414) or its `traceparent` header; and one CLIENT span per provider call. The MCP SDK's
own client span nests under it and writes the trace context into the provider request's `params._meta`;
`lift_trace_context` copies it to the HTTP `traceparent` header too, so HTTP-level tracing at the provider joins
the trace. Spans never carry arguments, results, URLs with their query, or credentials: only names, ids and
outcome codes.

With tracing off no provider is installed: no span is started (the helpers hand out the API's invalid span) and
nothing is exported.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import propagate, trace
from opentelemetry.context import Context
from opentelemetry.trace import Span, SpanKind, StatusCode

TRACER_NAME = "switchboard"
MODES = ("off", "otlp", "console")

_tracer = trace.get_tracer(TRACER_NAME)  # a proxy: it follows the provider installed later


def configure(mode: str) -> None:
    """Install the SDK's tracer provider for `mode` (once per process; a provider already installed is kept)."""
    if mode not in MODES:
        raise ValueError(f"SWITCHBOARD_TRACING must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "off":
        return
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter

    if isinstance(trace.get_tracer_provider(), TracerProvider):
        return
    provider = TracerProvider(
        resource=Resource.create({"service.name": os.environ.get("OTEL_SERVICE_NAME") or "switchboard"})
    )
    processor: SpanProcessor
    if mode == "otlp":
        # Endpoint, headers and protocol details from the standard OTEL_EXPORTER_OTLP_* variables.
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        processor = BatchSpanProcessor(OTLPSpanExporter())
    else:
        processor = BatchSpanProcessor(ConsoleSpanExporter())
    provider.add_span_processor(processor)
    trace.set_tracer_provider(provider)


def is_on() -> bool:
    """A tracer provider is installed (`configure`, or a test's): until then no span is even started."""
    return not isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)


def _parent(meta: Any, headers: Any) -> Context | None:
    """The caller's trace context: `params._meta` first (MCP SEP-414), else the HTTP headers."""
    for carrier in (meta, headers):
        # Any mapping-like carrier: a dict, or the request's case-insensitive headers.
        if carrier is not None and callable(getattr(carrier, "get", None)) and carrier.get("traceparent"):
            try:
                context = propagate.extract(carrier)
            except (TypeError, ValueError):
                continue
            if trace.get_current_span(context).get_span_context().is_valid:
                return context
    return None


@contextmanager
def mcp_request_span(
    method: str,
    request_id: object,
    params: dict,
    protocol_version: str,
    headers: Any = None,
) -> Iterator[Span]:
    """The SERVER span of one MCP request on an agent door."""
    if not is_on():
        yield trace.INVALID_SPAN
        return
    tool = params.get("name") if method == "tools/call" else None
    attributes: dict[str, Any] = {
        "mcp.method.name": method,
        "jsonrpc.request.id": str(request_id),
        "mcp.protocol.version": protocol_version,
        "network.transport": "tcp",
        "network.protocol.name": "http",
    }
    if isinstance(tool, str):
        attributes["gen_ai.operation.name"] = "execute_tool"
        attributes["gen_ai.tool.name"] = tool[:200]
    name = f"{method} {tool[:200]}" if isinstance(tool, str) else method
    with _span(name, SpanKind.SERVER, attributes, _parent(params.get("_meta"), headers)) as span:
        yield span


def record_reply(span: Span, body: object) -> None:
    """What the answer says about the request: a JSON-RPC error code, or a tool result with `isError`."""
    if not isinstance(body, dict) or not span.is_recording():
        return
    error = body.get("error")
    if isinstance(error, dict):
        code = str(error.get("code"))
        span.set_attribute("error.type", code)
        span.set_attribute("rpc.response.status_code", code)
        span.set_status(StatusCode.ERROR)
    result = body.get("result")
    if isinstance(result, dict) and result.get("isError") is True:
        span.set_attribute("error.type", "tool_error")
        span.set_status(StatusCode.ERROR)


@contextmanager
def provider_call_span(tool_name: str, server_url: str, connection_id: object | None) -> Iterator[Span]:
    """The CLIENT span of one tools/call to a provider (only its host and port: a URL's query may hold a key)."""
    if not is_on():
        yield trace.INVALID_SPAN
        return
    parts = urlsplit(server_url)
    attributes: dict[str, Any] = {
        "mcp.method.name": "tools/call",
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": tool_name[:200],
        "server.address": parts.hostname or "",
        "network.transport": "tcp",
        "network.protocol.name": "http",
    }
    if parts.port:
        attributes["server.port"] = parts.port
    if connection_id is not None:
        attributes["switchboard.connection.id"] = str(connection_id)
    with _span(f"tools/call {tool_name[:200]}", SpanKind.CLIENT, attributes, None) as span:
        yield span


def mark_failed(span: Span, error_type: str) -> None:
    span.set_attribute("error.type", error_type)
    span.set_status(StatusCode.ERROR)


@contextmanager
def _span(name: str, kind: SpanKind, attributes: dict[str, Any], parent: Context | None) -> Iterator[Span]:
    # Exceptions are noted by their type only: their messages may quote what a call carried.
    with _tracer.start_as_current_span(
        name,
        kind=kind,
        attributes=attributes,
        context=parent,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            mark_failed(span, type(exc).__name__)
            raise


async def lift_trace_context(request: Any) -> None:
    """httpx request hook: copy the trace context the MCP SDK put in a POSTed message's `params._meta` to the HTTP
    `traceparent`/`tracestate` headers (the pooled session's HTTP client cannot see the caller's context itself)."""
    if request.method != "POST":
        return
    try:
        content = request.content
    except Exception:  # a streamed body not read yet: nothing to lift
        return
    if b'"traceparent"' not in content:
        return
    try:
        message = json.loads(content)
    except ValueError:
        return
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        return
    for header in ("traceparent", "tracestate"):
        value = meta.get(header)
        if isinstance(value, str) and value:
            request.headers[header] = value
