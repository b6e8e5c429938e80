"""Client for providers' remote MCP servers (Streamable HTTP, or HTTP+SSE where a method says `transport: sse`),
used with stored credentials.

Switchboard talks to a provider's MCP server for two reasons: at setup time to verify an API key and index the
provider's tools (`list_tools`), and later to call a tool on behalf of an agent (`call_tool`). `list_tools` opens a
fresh connection with the official MCP SDK client (the method's transport over an `httpx2.AsyncClient`, see
`transports`, then `ClientSession.initialize()`), does its work and closes it. Both transports get the same
guard, timeouts, limits and error mapping. `call_tool` borrows a live session kept per (server URL,
credential headers digest, guard, timeout) in this process (`session_pool`): one handshake for many calls; a
transport or auth failure evicts the session, and a reused session the provider forgot (404 on its session id, or
no connection) is retried once on a fresh one, since the call cannot have run. `client.CLIENT.close()` closes them
all.

Callers are synchronous (Flask request threads and workers, with no running event loop), so the public functions run
the async code on the process's one event loop (a daemon thread started on first use: `client.ProviderClient`): creating and
tearing down a loop per call cost more than the call to a local provider. There is deliberately no async entry point: each call goes through the
outbound guard (`guard=`), which an async shortcut would skip.

Every failure becomes a `ProviderError` whose `.message` is plain words that are safe to show a user: it never
contains the credential, the request headers or the query string. Outbound requests always carry timeouts, and the
whole exchange runs under one overall deadline; missing it is a `ProviderTimeout` ("did not answer within N
seconds"), not a failure to reach the server. `call_tool(..., limits=...)` first takes a slot in the provider's
bulkhead and passes its circuit breaker (`limits`), so one frozen provider cannot hold every request thread.
Nothing here reads Flask's request or touches the database."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import ssl
from collections.abc import AsyncIterator, Callable, Coroutine, Mapping
from typing import Any, TypeVar
from urllib.parse import urlsplit

import anyio
import httpx2
import mcp_types
from mcp import ClientSession
from mcp.shared.exceptions import MCPError
from pydantic import BaseModel

from app.adapters.providers import limits as provider_limits
from app.adapters.providers import session_pool
from app.adapters.providers import transports as provider_transports
from app.adapters.providers.call_control import CallControl, ProviderCancelled
from app.adapters.providers.client import CLIENT
from app.adapters.providers.errors import (
    AnswerTooLarge,
    ProviderBusy,
    ProviderError,
    ProviderPaused,
    ProviderTimeout,
    ProviderUnavailable,
    _cause_name,
    _scrub,
    _secret_values,
    _translate,
    _walk,
)
from app.adapters.providers.tools import (
    CONNECT_TIMEOUT_CAP,
    MAX_TOOL_PAGES,
    ProviderTool,
    _provider_tool,
)
from app.catalog.schema import Transport
from app.core import tracing
from app.core.mcp_messages import CLIENT_INFO
from app.core.net_guard import guarded_async_transport

logger = logging.getLogger(__name__)

# The most of one HTTP answer an exchange reads, unless the caller says (`PROVIDER_MAX_RESPONSE_BYTES`).
DEFAULT_MAX_RESPONSE_BYTES = 8 * 1024 * 1024


# -- public calls ------------------------------------------------------------------------------------------------


def list_tools(
    server_url: str,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
    guard: frozenset[str] | None = None,
    transport: Transport = "mcp_remote",
    max_tools: int | None = None,
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> list[ProviderTool]:
    """Connect, initialize and list every tool (following pagination cursors). Raises ProviderError.

    With `max_tools`, paging stops once more than that many were seen (at most `max_tools + 1` come back, so the
    caller can tell the provider offers more than it keeps: `tool_index.bounded_tools`).

    `guard` (the outbound guard's allowed hosts) pins connections to addresses checked at connect time; pass it
    for URLs a member typed. `transport` is the method's (`mcp_remote`: Streamable HTTP, or `sse`).
    `max_response_bytes` bounds one HTTP answer (the caller's `PROVIDER_MAX_RESPONSE_BYTES`).
    """
    exchange = _Exchange(server_url, headers, timeout, guard, transport, max_response_bytes)
    return _on_loop(_run_list_tools(exchange, max_tools))


def call_tool(
    server_url: str,
    *,
    headers: dict[str, str] | None = None,
    tool_name: str,
    arguments: dict,
    timeout: float = 30.0,
    guard: frozenset[str] | None = None,
    limits: provider_limits.Limits | None = None,
    control: CallControl | None = None,
    transport: Transport = "mcp_remote",
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
) -> dict:
    """Call one tool once on the pooled session (opened and initialized if needed). Raises ProviderError.

    `guard` and `transport` as for `list_tools`; both are part of the pool key, so a guarded call never borrows an
    unguarded client.

    Returns `{"content": [blocks as dicts], "structuredContent": ... or None, "isError": bool, "_meta": ... or
    None}`; a tool that ran and reported failure comes back with `isError: true`, not as an exception. With
    `control` (`call_control.CallControl`), the provider's progress notifications reach `control.on_progress` and
    `control.cancel()` abandons the call (the provider is sent `notifications/cancelled`), raising ProviderCancelled. With `limits`, the call takes a slot in
    the provider's bulkhead and passes its circuit breaker first (`app.adapters.providers.limits`): a full bulkhead
    raises ProviderBusy and an open breaker ProviderPaused at once, without contacting the provider, and a
    ProviderTimeout counts towards opening the breaker.
    """
    exchange = _Exchange(server_url, headers, timeout, guard, transport, max_response_bytes)
    return _on_loop(_run_call_tool(exchange, tool_name, arguments, limits, control), control)


# -- the process's event loop ------------------------------------------------------------------------------------

T = TypeVar("T")
R = TypeVar("R", bound=BaseModel)


def _on_loop(coroutine: Coroutine[Any, Any, T], control: CallControl | None = None) -> T:
    """Run `coroutine` on the process's loop and wait for it (every exchange has its own overall deadline); with
    `control`, waiting also watches for a cancellation recorded elsewhere (`CallControl.wait`)."""
    future = asyncio.run_coroutine_threadsafe(coroutine, CLIENT.event_loop())
    return control.wait(future) if control is not None else future.result()


# -- the exchange ------------------------------------------------------------------------------------------------


@functools.cache
def _ssl_context() -> ssl.SSLContext:
    """One client SSL context per process: building one loads the CA bundle (about 20 ms), once per call before."""
    return httpx2.create_ssl_context()


class _CappedStream(httpx2.AsyncByteStream):
    """A response body that stops at `limit` bytes (raising `AnswerTooLarge`) instead of growing the process."""

    def __init__(self, inner: httpx2.AsyncByteStream, limit: int) -> None:
        self._inner = inner
        self._limit = limit

    async def __aiter__(self) -> AsyncIterator[bytes]:
        seen = 0
        async for chunk in self._inner:
            seen += len(chunk)
            if seen > self._limit:
                raise AnswerTooLarge(self._limit)
            yield chunk

    async def aclose(self) -> None:
        await self._inner.aclose()


class _Exchange:
    """One connection to a provider: builds the HTTP client and remembers the first HTTP error status it saw.

    The SDK transport turns an HTTP error answer into a generic JSON-RPC error, so the status (401 vs 500) is caught
    here with an httpx response hook instead of being dug out of the exception afterwards.
    """

    def __init__(
        self,
        server_url: str,
        headers: Mapping[str, str] | None,
        timeout: float,
        guard: frozenset[str] | None = None,
        transport: Transport = "mcp_remote",
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
    ):
        if timeout <= 0:
            raise ValueError("timeout must be positive")
        parts = urlsplit(server_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ProviderUnavailable("the server address is not an http(s) URL")
        self.server_url = server_url
        self.host = parts.hostname
        self.headers = dict(headers or {})
        self.timeout = timeout
        self.guard = guard
        self.transport: Transport = transport
        self.error_status: int | None = None
        self.secrets = _secret_values(self.headers, parts.query)
        self.max_response_bytes = max_response_bytes

    async def _on_response(self, response: httpx2.Response) -> None:
        # The answer to one message (a POST: JSON, or an SSE stream ending in the result) is bounded; a standalone
        # GET event stream is not, as it may rightly carry more over a long session.
        if (
            self.max_response_bytes
            and response.request.method == "POST"
            and isinstance(response.stream, httpx2.AsyncByteStream)
        ):
            response.stream = _CappedStream(response.stream, self.max_response_bytes)
        if response.status_code < 400:
            return
        holder = session_pool.current_status.get()  # a pooled client: the status of whose request
        if holder is not None:
            holder.record(response.status_code)
        elif self.error_status is None:
            self.error_status = response.status_code

    def http_client(self, stream_read_timeout: float | None = None) -> httpx2.AsyncClient:
        timeout = httpx2.Timeout(
            self.timeout,
            connect=min(self.timeout, CONNECT_TIMEOUT_CAP),
            read=max(self.timeout, stream_read_timeout or 0),
            write=self.timeout,
            pool=self.timeout,
        )
        verify = _ssl_context()
        return httpx2.AsyncClient(
            headers=self.headers,
            timeout=timeout,
            verify=verify,
            event_hooks={"request": [tracing.lift_trace_context], "response": [self._on_response]},
            transport=guarded_async_transport(self.guard, verify) if self.guard is not None else None,
        )

    def streams(self) -> contextlib.AbstractAsyncContextManager[provider_transports.Streams]:
        """The (read, write) streams of one connection over the method's transport, with this exchange's client."""
        return provider_transports.open_streams(self.transport, self.server_url, self.http_client)

    def session(self, read: Any, write: Any) -> ClientSession:
        return ClientSession(
            read,
            write,
            read_timeout_seconds=self.timeout,
            client_info=CLIENT_INFO,
            message_handler=self._on_message,
        )

    async def _on_message(self, message: Any) -> None:
        # The provider says its tools changed (issue 28): its connection is re-indexed (`tool_changes`).
        if isinstance(message, mcp_types.ToolListChangedNotification):
            CLIENT.note_tools_changed(self.server_url)
        await anyio.lowlevel.checkpoint()

    def translate(self, exc: BaseException, *, calling: str | None = None) -> ProviderError:
        """Map whatever the SDK/httpx raised (ExceptionGroups included) to a ProviderError with a safe message."""
        error = _translate(exc, self.error_status, self.timeout, calling, self.secrets)
        error.message = _scrub(error.message, self.secrets)
        error.args = (error.message,)
        logger.warning(
            "Provider MCP exchange with %s failed: %s (%s)",
            self.host,
            error.message,
            _cause_name(exc),
        )
        return error


async def _run_list_tools(exchange: _Exchange, max_tools: int | None = None) -> list[ProviderTool]:
    try:
        with anyio.fail_after(exchange.timeout):
            async with exchange.streams() as (read, write), exchange.session(read, write) as session:
                await session.initialize()
                tools = await _all_tools(session, max_tools)
    except ProviderError:
        raise
    except Exception as exc:
        raise exchange.translate(exc) from None
    return tools


async def _all_tools(session: ClientSession, max_tools: int | None = None) -> list[ProviderTool]:
    tools: dict[str, ProviderTool] = {}
    enough = None if max_tools is None else max_tools + 1
    cursor: str | None = None
    seen_cursors: set[str] = set()
    for _ in range(MAX_TOOL_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        for tool in page.tools:
            if enough is not None and len(tools) >= enough:
                return list(tools.values())
            if tool.name not in tools:
                tools[tool.name] = _provider_tool(tool)
        cursor = page.next_cursor
        if not cursor or cursor in seen_cursors:
            break
        seen_cursors.add(cursor)
    return list(tools.values())


async def _run_call_tool(
    exchange: _Exchange,
    tool_name: str,
    arguments: dict,
    limits: provider_limits.Limits | None = None,
    control: CallControl | None = None,
) -> dict:
    return await run_limited(exchange, limits, lambda: _call_once(exchange, tool_name, arguments, control))


async def run_limited(
    exchange: _Exchange,
    limits: provider_limits.Limits | None,
    attempt: Callable[[], Coroutine[Any, Any, T]],
) -> T:
    """Run one exchange with the provider in its bulkhead and past its breaker (when `limits` is given)."""
    if limits is None:
        return await attempt()
    try:
        with provider_limits.slot(provider_limits.provider_key(exchange.server_url), limits) as call:
            try:
                return await attempt()
            except ProviderTimeout:
                call.timed_out()
                raise
    except provider_limits.Busy as busy:
        raise ProviderBusy(busy.limit) from None
    except provider_limits.Paused as paused:
        raise ProviderPaused(paused.timeouts, paused.retry_after_seconds) from None


async def _call_once(
    exchange: _Exchange, tool_name: str, arguments: dict, control: CallControl | None = None
) -> dict:
    progress = _progress_relay(control)
    key = session_pool.key_for(
        exchange.server_url, exchange.headers, exchange.guard, exchange.timeout, exchange.transport
    )
    # send_request rather than session.call_tool: the latter lists tools first to validate the result against the
    # tool's output schema, and would turn a call that already ran at the provider into an error when the
    # provider's result does not match its own schema. We pass through what it said.
    request = mcp_types.CallToolRequest(
        params=mcp_types.CallToolRequestParams(name=tool_name, arguments=arguments)
    )
    try:
        with anyio.CancelScope() as cancel_scope, anyio.fail_after(exchange.timeout):
            if control is not None:
                control.attach(cancel_scope)
            result = await send_pooled(exchange, key, request, mcp_types.CallToolResult, progress, control)
    except ProviderError:
        raise
    except Exception as exc:
        if control is not None and control.cancelled:
            raise ProviderCancelled() from None
        raise exchange.translate(exc, calling=tool_name) from None
    finally:
        if control is not None:
            control.detach()
    if cancel_scope.cancelled_caught:
        raise ProviderCancelled()
    return {
        "content": [
            block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content
        ],
        "structuredContent": result.structured_content,
        "isError": bool(result.is_error),
        "_meta": result.meta,
    }


async def send_pooled(
    exchange: _Exchange,
    key: session_pool.Key,
    request: mcp_types.ClientRequest,
    result_type: type[R],
    progress: Any,
    control: CallControl | None,
) -> R:
    """Send `request` on the pooled session for `key`; once more on a fresh session if a reused one was forgotten.

    A reused session whose provider no longer knows it (HTTP 404 on the session id, e.g. after a restart) or whose
    connection could not be made ran nothing at the provider, so the call is retried once on a fresh session. Any
    other transport or auth failure evicts the session and is raised; a tool or protocol error from a provider that
    answered keeps it, and so does the agent's cancellation (the SDK tells the provider, the session stays usable).
    """
    for attempt in (1, 2):
        holder = session_pool.StatusHolder()
        token = session_pool.current_status.set(holder)
        try:
            try:
                lease = await session_pool.acquire(
                    key, exchange.streams, exchange.session, fresh=attempt == 2
                )
            except BaseException:
                exchange.error_status = holder.status
                raise
            try:
                result = await lease.session.send_request(request, result_type, progress_callback=progress)
            except BaseException as exc:
                exchange.error_status = holder.status
                cancelled = isinstance(exc, anyio.get_cancelled_exc_class())
                keep = (cancelled and control is not None and control.cancelled) or (
                    not cancelled and holder.status is None and answered(exc)
                )
                session_pool.release(lease, evict_session=not keep)
                failure: BaseException = exc
                if isinstance(exc, MCPError) and exc.code == mcp_types.CONNECTION_CLOSED:
                    # The transport died under the call: why (no connection could be made?) is the owner's.
                    cause = await lease.entry.ended(_TRANSPORT_PATIENCE)
                    if cause is not None:
                        failure = cause
                        exchange.error_status = exchange.error_status or _first_status(cause)
                if attempt == 1 and lease.reused and not cancelled and _forgotten(failure, holder.status):
                    logger.info(
                        "Provider session with %s was forgotten; retrying on a fresh one", exchange.host
                    )
                    continue
                if failure is exc:
                    raise
                raise failure from None
            session_pool.release(lease)
            return result
        finally:
            session_pool.current_status.reset(token)
    raise AssertionError("unreachable")  # pragma: no cover


_TRANSPORT_PATIENCE = 1.0


def _first_status(exc: BaseException) -> int | None:
    return next(
        (item.response.status_code for item in _walk(exc) if isinstance(item, httpx2.HTTPStatusError)), None
    )


def answered(exc: BaseException) -> bool:
    """Whether the provider itself answered with a JSON-RPC error (the session is fine)."""
    return isinstance(exc, MCPError) and exc.code not in (
        mcp_types.CONNECTION_CLOSED,
        mcp_types.REQUEST_TIMEOUT,
    )


def _forgotten(exc: BaseException, status: int | None) -> bool:
    """A failure that shows the request never ran: the session id was unknown (404), or no connection was made."""
    if status == 404:
        return True
    return status is None and any(isinstance(item, httpx2.ConnectError) for item in _walk(exc))


def _progress_relay(control: CallControl | None) -> Any:
    """The SDK progress callback that hands the provider's progress to `control.on_progress`, or None."""
    sink = control.on_progress if control is not None else None
    if sink is None:
        return None

    async def relay(progress: float, total: float | None, message: str | None) -> None:
        sink(progress, total, message)

    return relay
