"""`subscriptions/listen` on the tool gateway (2026-07-28 "Subscriptions"): the stream on which a client hears that
the run's tool list changed.

The answer is an SSE stream scoped to the listen request (still no sessions):

1. `notifications/subscriptions/acknowledged` first, with the part of the requested filter the gateway honours:
   `toolsListChanged` only. The gateway offers no prompts, lists no resources (it reads the links its tools hand
   out) and cannot follow a provider's resource, so `promptsListChanged`, `resourcesListChanged`,
   `resourceSubscriptions` and extension keys are left out of the acknowledgement ("notification types the server
   does not support are omitted") and never sent.
2. `notifications/tools/list_changed` each time the run's `tools/list` answer changes: a grant revoked or added, a
   policy changed, a connection disabled or removed, the run handed over to another person. Every such write
   raises the company's access revision in the database (`services/access/revision`), so whichever server process
   holds the stream sees it: the stream reads the run and that revision every `GATEWAY_LISTEN_POLL_SECONDS` (one
   statement, no connection held in between) and, when the revision or the run's audience moved, compares the
   run's listing (built once per revision and process, shared with `tools/list`: `services/gateway/tools`) with
   the one it last announced. A change elsewhere in the company that leaves this listing alone sends nothing.
3. Otherwise an SSE comment after each look: it keeps proxies and idle timeouts from closing the quiet stream, and
   it is how a disconnect is noticed (writing to a closed connection ends the stream, which frees its place).
4. The `SubscriptionsListenResult` (the graceful close: `_meta` names the subscription) when the run ends, its
   token expires or the server process is stopping; then the stream closes. A stream that honours nothing is closed so at once, after its
   acknowledgement, instead of holding a server thread for nothing.

Every frame carries the listen request's id as `_meta["io.modelcontextprotocol/subscriptionId"]`.

A stream holds one server thread for its life (gunicorn `gthread` workers), so a process keeps at most
`GATEWAY_LISTEN_MAX_STREAMS` open and a run at most `LISTENS_PER_RUN` in one process; one more is refused before
any acknowledgement with `-32603` "Subscription limit reached" (as the SDK's own server does), and the client may
listen again once another stream of its run closes. A listen needs the client to accept `text/event-stream` (406
otherwise, as the SDK's server answers). The earlier revisions have no `subscriptions/listen` (`-32601`), and the
runtime door speaks only 2025-03-26, where it does not exist either (its unknown methods stay 404 `-32601`,
DECISIONS).
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import mcp_types
from flask import Flask, Response, current_app
from mcp_types.jsonrpc import INTERNAL_ERROR, INVALID_PARAMS, INVALID_REQUEST
from pydantic import ValidationError

from app.core import mcp_messages
from app.models import HeartbeatRun
from app.services.gateway import tools as gateway_tools
from app.services.gateway.names import tool_name_budget
from app.services.runtime import context as run_context
from app.web.agents import jsonrpc
from app.web.agents.streaming import SSE_HEADERS, sse_event

log = logging.getLogger(__name__)

METHOD = "subscriptions/listen"
# The `_meta` key of every frame of a listen stream (the SDK's `mcp.shared.subscriptions.SUBSCRIPTION_ID_META_KEY`).
SUBSCRIPTION_ID = "io.modelcontextprotocol/subscriptionId"
# Per process: one stream is what a client needs; a second covers a re-listen racing the first one's end.
LISTENS_PER_RUN = 2
DEFAULT_MAX_STREAMS = 4
DEFAULT_POLL_SECONDS = 1.0
KEEPALIVE = ": listening\n\n"
LIMIT_REACHED = (
    f"Subscription limit reached: too many {METHOD} streams are open for this run or on this server; close one, "
    "or listen again later"
)

LiveRun = Callable[[], tuple[HeartbeatRun, int, str | None]]


class _Places:
    """The open listen streams of this process, counted per run (a stream holds a server thread)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_run: Counter[uuid.UUID] = Counter()

    def take(self, run_id: uuid.UUID, most: int) -> bool:
        with self._lock:
            if self._by_run[run_id] >= LISTENS_PER_RUN or self._by_run.total() >= most:
                return False
            self._by_run[run_id] += 1
            return True

    def release(self, run_id: uuid.UUID) -> None:
        with self._lock:
            self._by_run[run_id] -= 1
            if self._by_run[run_id] <= 0:
                del self._by_run[run_id]

    def open_streams(self, run_id: uuid.UUID | None = None) -> int:
        with self._lock:
            return self._by_run[run_id] if run_id is not None else self._by_run.total()


places = _Places()
# Set when this server process is told to stop (gunicorn.conf.py `post_worker_init`, on SIGTERM): every open stream
# closes gracefully at once instead of holding the worker's shutdown for its `graceful_timeout`.
shutting_down = threading.Event()


@dataclass(frozen=True)
class _Listing:
    """What a stream last announced: the state the listing was read under and a digest of its text."""

    revision: int
    responsible_user_id: uuid.UUID | None
    budget: int
    digest: bytes

    @classmethod
    def of(cls, run: HeartbeatRun, revision: int, adapter_type: str | None) -> _Listing:
        budget = tool_name_budget(adapter_type)
        text = gateway_tools.list_tool_definitions(run, revision, budget).text
        return cls(revision, run.responsible_user_id, budget, hashlib.sha256(text.encode()).digest())

    def still_describes(self, run: HeartbeatRun, revision: int, adapter_type: str | None) -> bool:
        """Nothing the listing depends on moved (then it is not read again)."""
        return (revision, run.responsible_user_id, tool_name_budget(adapter_type)) == (
            self.revision,
            self.responsible_user_id,
            self.budget,
        )


def listen(id_: Any, params: dict, claims: dict, live_run: LiveRun) -> jsonrpc.Reply | Response:
    """Answer one `subscriptions/listen` (2026-07-28) with its stream, or the error that refuses it."""
    if not jsonrpc.accepts_sse():
        message = (
            f"Not Acceptable: {METHOD} is answered with an SSE stream; Accept must include text/event-stream"
        )
        return mcp_messages.error(id_, INVALID_REQUEST, message), 406
    requested = params.get("notifications")
    try:
        wanted = mcp_types.SubscriptionFilter.model_validate(requested)
    except ValidationError:
        return mcp_messages.error(
            id_, INVALID_PARAMS, "Invalid params: notifications must be a subscription filter object"
        ), 200
    run, revision, adapter_type = live_run()
    meta = {SUBSCRIPTION_ID: id_}
    honored = (
        mcp_types.SubscriptionFilter(tools_list_changed=True)
        if wanted.tools_list_changed
        else mcp_types.SubscriptionFilter()
    )
    acknowledged = sse_event(
        mcp_messages.notification(
            mcp_types.SubscriptionsAcknowledgedNotification(
                params=mcp_types.SubscriptionsAcknowledgedNotificationParams(
                    notifications=honored, _meta=meta
                )
            )
        )
    )
    closing = sse_event(
        jsonrpc.message(id_, result=jsonrpc.modern_result(gateway_tools.SERVER_NAME, {"_meta": meta}))
    )
    if not honored.tools_list_changed:
        return _sse(iter((acknowledged, closing)))
    announced = _Listing.of(run, revision, adapter_type)
    app: Flask = current_app._get_current_object()  # type: ignore[attr-defined]
    if not places.take(run.id, int(app.config.get("GATEWAY_LISTEN_MAX_STREAMS", DEFAULT_MAX_STREAMS))):
        return mcp_messages.error(id_, INTERNAL_ERROR, LIMIT_REACHED), 200
    changed = sse_event(
        mcp_messages.notification(
            mcp_types.ToolListChangedNotification(params=mcp_types.NotificationParams(_meta=meta))
        )
    )
    # The place is given back by whichever comes first: the server closing the response (also when the stream never
    # started: a generator that never ran has no `finally`), or the stream's end (also when a server fails to close
    # the response: werkzeug's, when the client reset the connection; the generator is then closed when collected).
    release = _release_once(run.id)
    response = _sse(_watch(app, claims, announced, (acknowledged, changed, closing), release))
    response.call_on_close(release)
    return response


def _release_once(run_id: uuid.UUID) -> Callable[[], None]:
    """Gives the run's place back on its first call only (the two callers may be on different threads: `pop` is
    atomic)."""
    held = [run_id]

    def release() -> None:
        try:
            run = held.pop()
        except IndexError:
            return  # given back already
        places.release(run)

    return release


def _sse(frames: Iterator[str]) -> Response:
    return Response(frames, mimetype="text/event-stream", headers=SSE_HEADERS)


def _watch(
    app: Flask, claims: dict, announced: _Listing, texts: tuple[str, str, str], release: Callable[[], None]
) -> Iterator[str]:
    """The stream: the acknowledgement, then a look every poll interval until the run ends or the token expires."""
    acknowledged, changed, closing = texts
    poll = float(app.config.get("GATEWAY_LISTEN_POLL_SECONDS", DEFAULT_POLL_SECONDS))
    expires_at = float(claims.get("exp") or 0) or None
    try:
        yield acknowledged
        while True:
            wait = poll if expires_at is None else min(poll, expires_at - time.time())
            if (wait > 0 and shutting_down.wait(wait)) or shutting_down.is_set():
                break  # the server is stopping: the client listens again (elsewhere) and refetches
            if expires_at is not None and time.time() >= expires_at:
                break
            try:
                with app.app_context():
                    announced, moved = _look(claims, announced)
            except run_context.RunRejected:
                break  # the run ended (or its token no longer matches it): the subscription ends with it
            except Exception:
                # A failed look (the database away) drops the stream without the graceful close: the client
                # listens again and refetches, where a graceful close would tell it the subscription is over.
                log.exception("subscriptions/listen: reading the run's access failed; dropping the stream")
                return
            yield changed if moved else KEEPALIVE
        yield closing
    finally:
        release()


def _look(claims: dict, announced: _Listing) -> tuple[_Listing, bool]:
    """The run's listing state now, and whether its listing differs from `announced` (raises `RunRejected` once the
    run ended). One statement while nothing moved; the session goes with the app context, so no connection is kept
    between looks. A change elsewhere in the company gives a newer state with the same digest: nothing to say, and
    the listing is not read again until something moves once more."""
    run, revision, adapter_type = run_context.load_live_run_and_revision(claims)
    if announced.still_describes(run, revision, adapter_type):
        return announced, False
    now = _Listing.of(run, revision, adapter_type)
    return now, now.digest != announced.digest
