"""Client for providers' remote MCP servers (Streamable HTTP), used with stored credentials.

Switchboard talks to a provider's MCP server for two reasons: at setup time to verify an API key and index the
provider's tools (`list_tools`), and later to call a tool on behalf of an agent (`call_tool`). Both open a fresh
connection with the official MCP SDK client (`streamable_http_client` over an `httpx2.AsyncClient`, then
`ClientSession.initialize()`), do their work and close it; nothing is kept between calls.

Callers are synchronous (Flask request threads and workers, with no running event loop), so the public functions run
the async code with `anyio.run`; `list_tools_async` and `call_tool_async` are there for async callers.

Every failure becomes a `ProviderError` whose `.message` is plain words that are safe to show a user: it never
contains the credential, the request headers or the query string. Outbound requests always carry timeouts, and the
whole exchange runs under one overall deadline; missing it is a `ProviderTimeout` ("did not answer within N
seconds"), not a failure to reach the server. `call_tool(..., limits=...)` first takes a slot in the provider's
bulkhead and passes its circuit breaker (`provider_limits`), so one frozen provider cannot hold every request thread.
Nothing here reads Flask's request or touches the database.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import re
import socket
import ssl
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import anyio
import httpx2
import mcp_types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from app.core.net_guard import guarded_async_transport
from app.services import provider_limits

logger = logging.getLogger(__name__)

CLIENT_INFO = mcp_types.Implementation(name="switchboard", version="0.1.0")
# Connecting should never take long; a slow provider may still take its time to answer.
CONNECT_TIMEOUT_CAP = 5.0
MAX_TOOL_PAGES = 50

# First word of a tool name that marks it as changing something at the provider (used only when the tool has no
# readOnlyHint/destructiveHint annotations). Erring towards "write" is the safe side: write tools get stricter policy.
_WRITE_VERB_WORDS = """
    add append archive assign book cancel charge clear close comment create delete destroy disable drop edit enable
    execute import insert invite merge modify move pay post publish purge put patch refund remove rename reopen replace
    reply reset revoke run save schedule send set share start stop submit subscribe transfer trigger unsubscribe update
    upload upsert write
"""
WRITE_VERBS = frozenset(_WRITE_VERB_WORDS.split())

# Headers the MCP transport owns; a key placement must not override them.
_RESERVED_HEADERS = frozenset(
    {"accept", "content-type", "content-length", "host", "mcp-session-id", "mcp-protocol-version"}
)


# -- results and errors ------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ProviderTool:
    """One tool as the provider describes it, plus what Switchboard derives from it."""

    name: str
    description: str
    input_schema: dict
    is_write: bool
    version_hash: str


class ProviderError(Exception):
    """A provider exchange failed. `.message` is safe to show a user (no credential, headers or query string)."""

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class ProviderAuthRejected(ProviderError):
    """The provider answered 401 or 403: the credential is wrong, expired or lacks access."""

    def __init__(self, status_code: int):
        self.status_code = status_code
        super().__init__(f"The provider rejected the credentials (HTTP {_status_text(status_code)}).")


class ProviderUnavailable(ProviderError):
    """The provider's MCP server could not be reached or did not answer like an MCP server."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"Could not reach the provider's MCP server: {reason}.")


class ProviderTimeout(ProviderUnavailable):
    """The provider's MCP server did not answer within the call's timeout (it may still be working on the call)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.reason = f"no answer within {seconds:g} seconds"
        ProviderError.__init__(self, f"The provider's MCP server did not answer within {seconds:g} seconds.")


class ProviderBusy(ProviderError):
    """The bulkhead is full: `limit` calls to this provider are already running in this process (nothing sent)."""

    def __init__(self, limit: int):
        self.limit = limit
        super().__init__(
            f"The provider is busy: {limit} calls to it are already in progress. Try again shortly."
        )


class ProviderPaused(ProviderError):
    """The circuit breaker is open after repeated timeouts (nothing sent); a trial call is allowed later."""

    def __init__(self, timeouts: int, retry_after_seconds: int):
        self.timeouts = timeouts
        self.retry_after_seconds = retry_after_seconds
        super().__init__(
            f"The provider did not answer the last {timeouts} calls in time, so calls to it are paused; "
            f"try again in {retry_after_seconds} seconds."
        )


class ProviderToolError(ProviderError):
    """A tool call failed at the protocol level (a JSON-RPC error, not a result with isError)."""


# -- tools -------------------------------------------------------------------------------------------------------


def tool_is_write(name: str, annotations: Mapping[str, Any] | None) -> bool:
    """Whether a tool changes something: readOnlyHint decides, else destructiveHint=true, else the name's verb."""
    annotations = annotations or {}
    read_only = annotations.get("readOnlyHint")
    if read_only is not None:
        return not read_only
    if annotations.get("destructiveHint") is True:
        return True
    return _first_word(name) in WRITE_VERBS


def _first_word(name: str) -> str:
    # "notes.create_note" / "github/createIssue" / "Save-Memory" -> create / create / save
    last_segment = re.split(r"[./:]", name)[-1]
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", last_segment)
    words = [word for word in re.split(r"[^A-Za-z0-9]+", spaced) if word]
    return words[0].lower() if words else ""


def tool_version_hash(name: str, description: str, input_schema: Mapping[str, Any]) -> str:
    """sha256 hex of the canonical JSON of {name, description, inputSchema}: changes when the provider's tool does."""
    canonical = json.dumps(
        {"name": name, "description": description, "inputSchema": input_schema},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _provider_tool(tool: mcp_types.Tool) -> ProviderTool:
    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else None
    description = tool.description or ""
    input_schema = dict(tool.input_schema)
    return ProviderTool(
        name=tool.name,
        description=description,
        input_schema=input_schema,
        is_write=tool_is_write(tool.name, annotations),
        version_hash=tool_version_hash(tool.name, description, input_schema),
    )


# -- where the key goes ------------------------------------------------------------------------------------------


def headers_for_key(
    key_placement: Mapping[str, Any], secret_value: str
) -> tuple[dict[str, str], dict[str, str]]:
    """Build (headers, query_params) that carry an API key as the app definition's key placement says.

    `key_placement` is `{"location": "header" | "query", "name": ..., "prefix": ...}`; `name` defaults to
    "Authorization" for headers, and `prefix` (e.g. "Bearer") is joined to the secret with one space unless it is
    empty or already ends in whitespace. For query placement, append the params with `url_with_query`.
    """
    location = key_placement.get("location", "header")
    secret = secret_value.strip()
    if not secret:
        raise ValueError("The API key is empty.")
    if any(ch in secret for ch in "\r\n\0"):
        raise ValueError("The API key contains a line break or NUL character.")
    prefix = key_placement.get("prefix") or ""
    if prefix and not prefix[-1].isspace():
        prefix += " "
    value = f"{prefix}{secret}"
    if location == "header":
        name = key_placement.get("name") or "Authorization"
        if name.lower() in _RESERVED_HEADERS or not re.fullmatch(r"[A-Za-z0-9!#$%&'*+.^_`|~-]+", name):
            raise ValueError(f"{name!r} cannot carry an API key.")
        return {name: value}, {}
    if location == "query":
        name = key_placement.get("name")
        if not name:
            raise ValueError("A query key placement needs a parameter name.")
        return {}, {name: value}
    raise ValueError(f"Unknown key location {location!r}; expected 'header' or 'query'.")


def url_with_query(url: str, params: Mapping[str, str]) -> str:
    """Return `url` with `params` added to its query string (a param of the same name is replaced)."""
    if not params:
        return url
    parts = urlsplit(url)
    query = [
        (key, value) for key, value in parse_qsl(parts.query, keep_blank_values=True) if key not in params
    ]
    query.extend(params.items())
    return urlunsplit(parts._replace(query=urlencode(query)))


# -- public calls ------------------------------------------------------------------------------------------------


def list_tools(
    server_url: str,
    *,
    headers: dict[str, str] | None = None,
    timeout: float = 10.0,
    guard: frozenset[str] | None = None,
) -> list[ProviderTool]:
    """Connect, initialize and list every tool (following pagination cursors). Raises ProviderError.

    `guard` (the outbound guard's allowed hosts) pins connections to addresses checked at connect time; pass it
    for URLs a member typed.
    """
    return anyio.run(_run_list_tools, server_url, headers, timeout, guard)


def call_tool(
    server_url: str,
    *,
    headers: dict[str, str] | None = None,
    tool_name: str,
    arguments: dict,
    timeout: float = 30.0,
    guard: frozenset[str] | None = None,
    limits: provider_limits.Limits | None = None,
) -> dict:
    """Connect, initialize and call one tool once. Raises ProviderError (`guard` as for `list_tools`).

    Returns `{"content": [blocks as dicts], "structuredContent": ... or None, "isError": bool}`; a tool that ran and
    reported failure comes back with `isError: true`, not as an exception. With `limits`, the call takes a slot in
    the provider's bulkhead and passes its circuit breaker first (`app.services.provider_limits`): a full bulkhead
    raises ProviderBusy and an open breaker ProviderPaused at once, without contacting the provider, and a
    ProviderTimeout counts towards opening the breaker.
    """
    return anyio.run(_run_call_tool, server_url, headers, tool_name, arguments, timeout, guard, limits)


async def list_tools_async(
    server_url: str, *, headers: dict[str, str] | None = None, timeout: float = 10.0
) -> list[ProviderTool]:
    """`list_tools` for callers that already run an event loop."""
    return await _run_list_tools(server_url, headers, timeout)


async def call_tool_async(
    server_url: str,
    *,
    headers: dict[str, str] | None = None,
    tool_name: str,
    arguments: dict,
    timeout: float = 30.0,
    limits: provider_limits.Limits | None = None,
) -> dict:
    """`call_tool` for callers that already run an event loop."""
    return await _run_call_tool(server_url, headers, tool_name, arguments, timeout, limits=limits)


# -- the exchange ------------------------------------------------------------------------------------------------


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
        self.error_status: int | None = None
        self.secrets = _secret_values(self.headers, parts.query)

    async def _on_response(self, response: httpx2.Response) -> None:
        if response.status_code >= 400 and self.error_status is None:
            self.error_status = response.status_code

    def http_client(self) -> httpx2.AsyncClient:
        timeout = httpx2.Timeout(
            self.timeout,
            connect=min(self.timeout, CONNECT_TIMEOUT_CAP),
            read=self.timeout,
            write=self.timeout,
            pool=self.timeout,
        )
        return httpx2.AsyncClient(
            headers=self.headers,
            timeout=timeout,
            event_hooks={"response": [self._on_response]},
            transport=guarded_async_transport(self.guard) if self.guard is not None else None,
        )

    def session(self, read: Any, write: Any) -> ClientSession:
        return ClientSession(read, write, read_timeout_seconds=self.timeout, client_info=CLIENT_INFO)

    def translate(self, exc: BaseException, *, calling: str | None = None) -> ProviderError:
        """Map whatever the SDK/httpx raised (ExceptionGroups included) to a ProviderError with a safe message."""
        error = _translate(exc, self.error_status, self.timeout, calling)
        error.message = _scrub(error.message, self.secrets)
        error.args = (error.message,)
        logger.warning(
            "Provider MCP exchange with %s failed: %s (%s)",
            self.host,
            error.message,
            _cause_name(exc),
        )
        return error


async def _run_list_tools(
    server_url: str, headers: Mapping[str, str] | None, timeout: float, guard: frozenset[str] | None = None
) -> list[ProviderTool]:
    exchange = _Exchange(server_url, headers, timeout, guard)
    try:
        with anyio.fail_after(timeout):
            async with (
                exchange.http_client() as http,
                streamable_http_client(server_url, http_client=http) as (read, write),
                exchange.session(read, write) as session,
            ):
                await session.initialize()
                tools = await _all_tools(session)
    except ProviderError:
        raise
    except Exception as exc:
        raise exchange.translate(exc) from None
    return tools


async def _all_tools(session: ClientSession) -> list[ProviderTool]:
    tools: dict[str, ProviderTool] = {}
    cursor: str | None = None
    seen_cursors: set[str] = set()
    for _ in range(MAX_TOOL_PAGES):
        params = mcp_types.PaginatedRequestParams(cursor=cursor) if cursor else None
        page = await session.list_tools(params=params)
        for tool in page.tools:
            tools.setdefault(tool.name, _provider_tool(tool))
        cursor = page.next_cursor
        if not cursor or cursor in seen_cursors:
            break
        seen_cursors.add(cursor)
    return list(tools.values())


async def _run_call_tool(
    server_url: str,
    headers: Mapping[str, str] | None,
    tool_name: str,
    arguments: dict,
    timeout: float,
    guard: frozenset[str] | None = None,
    limits: provider_limits.Limits | None = None,
) -> dict:
    if limits is None:
        return await _call_once(server_url, headers, tool_name, arguments, timeout, guard)
    try:
        with provider_limits.slot(provider_limits.provider_key(server_url), limits) as call:
            try:
                return await _call_once(server_url, headers, tool_name, arguments, timeout, guard)
            except ProviderTimeout:
                call.timed_out()
                raise
    except provider_limits.Busy as busy:
        raise ProviderBusy(busy.limit) from None
    except provider_limits.Paused as paused:
        raise ProviderPaused(paused.timeouts, paused.retry_after_seconds) from None


async def _call_once(
    server_url: str,
    headers: Mapping[str, str] | None,
    tool_name: str,
    arguments: dict,
    timeout: float,
    guard: frozenset[str] | None,
) -> dict:
    exchange = _Exchange(server_url, headers, timeout, guard)
    try:
        with anyio.fail_after(timeout):
            async with (
                exchange.http_client() as http,
                streamable_http_client(server_url, http_client=http) as (read, write),
                exchange.session(read, write) as session,
            ):
                await session.initialize()
                # send_request rather than session.call_tool: the latter lists tools first to validate the result
                # against the tool's output schema, and would turn a call that already ran at the provider into an
                # error when the provider's result does not match its own schema. We pass through what it said.
                request = mcp_types.CallToolRequest(
                    params=mcp_types.CallToolRequestParams(name=tool_name, arguments=arguments)
                )
                result = await session.send_request(request, mcp_types.CallToolResult)
    except ProviderError:
        raise
    except Exception as exc:
        raise exchange.translate(exc, calling=tool_name) from None
    return {
        "content": [
            block.model_dump(mode="json", by_alias=True, exclude_none=True) for block in result.content
        ],
        "structuredContent": result.structured_content,
        "isError": bool(result.is_error),
    }


# -- error translation -------------------------------------------------------------------------------------------


def _walk(exc: BaseException) -> Iterator[BaseException]:
    """Every exception in the tree: ExceptionGroup members, then causes and contexts, each once."""
    seen: set[int] = set()
    stack = [exc]
    while stack:
        current = stack.pop()
        if id(current) in seen:
            continue
        seen.add(id(current))
        yield current
        stack.extend(reversed(getattr(current, "exceptions", ()) or ()))
        for linked in (current.__context__, current.__cause__):
            if linked is not None:
                stack.append(linked)


def _leaf(exc: BaseException) -> BaseException:
    """The first exception in the tree that says what went wrong (not a group, not a cancellation)."""
    for item in _walk(exc):
        if not isinstance(item, BaseExceptionGroup | asyncio.CancelledError):
            return item
    return exc


def _cause_name(exc: BaseException) -> str:
    """For the log: the class of the exception that best explains the failure."""
    telling = (httpx2.HTTPError, MCPError, TimeoutError, ValidationError, ssl.SSLError)
    found = next((item for item in _walk(exc) if isinstance(item, telling)), None)
    return type(found or _leaf(exc)).__name__


def _translate(
    exc: BaseException, error_status: int | None, timeout: float, calling: str | None
) -> ProviderError:
    chain = list(_walk(exc))
    status = error_status
    for item in chain:
        if isinstance(item, httpx2.HTTPStatusError) and status is None:
            status = item.response.status_code
    if status in (401, 403):
        return ProviderAuthRejected(status)
    if status is not None:
        return ProviderUnavailable(f"the server answered HTTP {_status_text(status)}")

    def first(kind: type[BaseException] | tuple[type[BaseException], ...]) -> Any:
        return next((item for item in chain if isinstance(item, kind)), None)

    if first(httpx2.ConnectTimeout) is not None:
        return ProviderUnavailable(f"no connection within {min(timeout, CONNECT_TIMEOUT_CAP):g} seconds")
    if first((TimeoutError, httpx2.TimeoutException)) is not None:
        return ProviderTimeout(timeout)
    if (connect_error := first(httpx2.ConnectError)) is not None:
        return ProviderUnavailable(_connect_reason(connect_error, chain))
    if first(ssl.SSLError) is not None:
        return ProviderUnavailable("the TLS handshake failed")
    if first(httpx2.LocalProtocolError) is not None:
        return ProviderError(
            "Could not send the request to the provider: a request header is not valid HTTP "
            "(check the key for stray characters)."
        )
    if (request_error := first(httpx2.RequestError)) is not None:
        return ProviderUnavailable(f"the connection failed ({type(request_error).__name__})")
    if (mcp_error := first(MCPError)) is not None:
        return _translate_mcp_error(mcp_error, calling, timeout)
    if first(ValidationError) is not None:
        return ProviderUnavailable("the server did not answer like an MCP server")
    runtime = first(RuntimeError)
    if runtime is not None and "protocol version" in str(runtime):
        return ProviderUnavailable("the server speaks an MCP protocol version Switchboard does not support")
    return ProviderUnavailable(f"unexpected error ({type(_leaf(exc)).__name__})")


def _translate_mcp_error(error: MCPError, calling: str | None, timeout: float) -> ProviderError:
    code = error.code
    if code == mcp_types.CONNECTION_CLOSED:
        return ProviderUnavailable("the connection closed before the server answered")
    if code == mcp_types.REQUEST_TIMEOUT:
        return ProviderTimeout(timeout)
    if code in (mcp_types.PARSE_ERROR, mcp_types.INVALID_REQUEST) and calling is None:
        return ProviderUnavailable("the server did not answer like an MCP server")
    server_said = _short(error.message)
    if calling is not None:
        return ProviderToolError(f"The provider could not run the tool {calling!r}: {server_said}")
    return ProviderUnavailable(f"the server answered with an MCP error: {server_said}")


def _connect_reason(error: httpx2.ConnectError, chain: list[BaseException]) -> str:
    if (
        any(isinstance(item, socket.gaierror) for item in chain)
        or "name or service not known" in str(error).lower()
    ):
        return "the host name could not be resolved"
    if any(isinstance(item, ConnectionRefusedError) for item in chain) or "refused" in str(error).lower():
        return "connection refused"
    if any(isinstance(item, ssl.SSLError) for item in chain):
        return "the TLS handshake failed"
    return "could not connect"


def _status_text(status: int) -> str:
    try:
        return f"{status} {HTTPStatus(status).phrase}"
    except ValueError:
        return str(status)


def _short(text: str, limit: int = 200) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _secret_values(headers: Mapping[str, str], query: str) -> list[str]:
    """Values that must never reach a message: header values (and their token part) and query values."""
    values: set[str] = set()
    for value in headers.values():
        values.add(value)
        values.update(value.split())
    values.update(value for _, value in parse_qsl(query, keep_blank_values=True))
    # Longest first so a token inside a longer value is not left half-replaced; skip trivial strings.
    return sorted((v for v in values if len(v) >= 4), key=len, reverse=True)


def _scrub(text: str, secrets: list[str]) -> str:
    for secret in secrets:
        text = text.replace(secret, "[redacted]")
    return text


_URL_QUERY = re.compile(r"""(https?://[^\s?#"'<>]+)\?[^\s#"'<>]*""")


class _RedactQueryStrings(logging.Filter):
    """httpx2 and the SDK transport log request URLs; a query-placed API key must not reach the logs with them."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if "?" in message:
            record.msg = _URL_QUERY.sub(r"\1?[redacted]", message)
            record.args = ()
        return True


# Filters on a logger only see records logged to that exact logger, so name each one that logs request URLs.
for _logger_name in ("httpx2", "mcp.client.streamable_http", "mcp.shared._httpx_utils"):
    logging.getLogger(_logger_name).addFilter(_RedactQueryStrings())
