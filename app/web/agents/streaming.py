"""A gateway `tools/call` answered on an SSE stream: the provider's progress as it comes, then the result.

Used when the agent's call carries `_meta.progressToken`, or speaks 2026-07-28, and its client accepts
`text/event-stream` (one request, one stream: still no sessions). The provider call runs in a worker thread with its own app context; the response
generator relays each progress notification (re-addressed to the agent's own progress token) and ends with the
JSON-RPC response. The request's unit of work has ended before the stream starts, so the worker writes the call's
activity row in a transaction of its own (`Reason.STREAMED_CALL_RECORDED`).

Cancellation follows each revision: on 2026-07-28 closing the stream *is* the cancellation (the generator is closed,
which cancels the provider call); on the older revisions a disconnect "SHOULD NOT be interpreted as the client
cancelling its request", so the call runs to its end (its activity is recorded) and only `notifications/cancelled`
naming this request cancels it. A 2025-11-25 stream opens with a priming event (an id, empty data); others open
with a comment, so the headers go out at once. While the provider works, a comment every `KEEPALIVE_SECONDS` keeps
proxies from closing an idle stream and is how a disconnect is noticed: writing to a closed connection ends the
generator.
"""

from __future__ import annotations

import json
import queue
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import mcp_types
from flask import Flask, Response, current_app
from opentelemetry import context as otel_context

from app.adapters.providers import call_control
from app.core import mcp_messages, mcp_versions
from app.extensions import db
from app.services.gateway import calls as gateway_calls
from app.services.gateway import cancellation
from app.services.gateway.results import PreparedCall, for_the_tool
from app.services.gateway.tools import SERVER_NAME
from app.web.agents import jsonrpc
from app.web.unit_of_work import Reason, commit_point

SSE_HEADERS = {"Cache-Control": "no-cache, no-transform", "X-Accel-Buffering": "no"}
KEEPALIVE_SECONDS = 1.0


def progress_token(params: dict) -> str | int | None:
    """The call's `_meta.progressToken` (a string or an integer), else None."""
    meta = params.get("_meta")
    token = meta.get("progressToken") if isinstance(meta, dict) else None
    if isinstance(token, bool) or not isinstance(token, str | int):
        return None
    return token


def sse_event(body: dict) -> str:
    return f"event: message\ndata: {json.dumps(body)}\n\n"


def streamed_call(
    id_: Any,
    token: str | int | None,
    run_id: uuid.UUID,
    prepared: PreparedCall,
    target: gateway_calls.ProviderTarget,
    exchange: jsonrpc.Exchange,
) -> Response:
    """Start the provider call and answer with the SSE stream that relays it (see the module docstring)."""
    app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
    events: queue.Queue[tuple[str, dict]] = queue.Queue()

    def on_progress(progress: float, total: float | None, message: str | None) -> None:
        params = mcp_types.ProgressNotificationParams(progress_token=token, progress=progress)
        if total is not None:
            params.total = total
        if message is not None:
            params.message = message
        events.put(("progress", mcp_messages.notification(mcp_types.ProgressNotification(params=params))))

    control = cancellation.control_for(run_id, id_, on_progress if token is not None else None)

    trace_context = otel_context.get_current()  # the request's MCP span, for the provider call's span

    def work() -> None:
        token = otel_context.attach(trace_context)
        try:
            _work()
        finally:
            otel_context.detach(token)

    def _work() -> None:
        with app.app_context(), call_control.in_flight(run_id, id_, control):
            try:
                result = for_the_tool(
                    gateway_calls.execute_call(prepared, target, control=control), prepared.has_output_schema
                )
                commit_point(Reason.STREAMED_CALL_RECORDED)
            except Exception:
                db.session.rollback()
                result = mcp_messages.tool_error(
                    "The call failed inside Switchboard; it may have run at the provider."
                )
            if exchange.modern:
                result = jsonrpc.modern_result(SERVER_NAME, result)
            events.put(("result", jsonrpc.message(id_, result=result)))

    worker = threading.Thread(target=work, name="gateway-streamed-call", daemon=True)
    worker.start()

    def stream() -> Iterator[str]:
        finished = False
        try:
            if exchange.version in mcp_versions.WITH_PRIMING_EVENT:
                yield f"id: {uuid.uuid4().hex}\ndata: \n\n"
            else:
                yield ": call started\n\n"
            while True:
                try:
                    kind, body = events.get(timeout=KEEPALIVE_SECONDS)
                except queue.Empty:
                    yield ": working\n\n"
                    continue
                yield sse_event(body)
                if kind == "result":
                    finished = True
                    return
        finally:
            if not finished and exchange.modern:
                control.cancel()  # 2026-07-28: the agent closed the stream, which cancels the call

    return Response(stream(), mimetype="text/event-stream", headers=SSE_HEADERS)
