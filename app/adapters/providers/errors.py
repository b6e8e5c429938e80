"""Provider failures as plain words safe to show a user: the error classes and the translation of
transport, HTTP and MCP errors (never the credential, headers or query string), and log redaction."""

from __future__ import annotations

import asyncio
import logging
import re
import socket
import ssl
from collections.abc import Iterator, Mapping
from http import HTTPStatus
from typing import Any
from urllib.parse import parse_qsl

import httpx2
import mcp_types
from mcp.shared.exceptions import MCPError
from pydantic import ValidationError

from app.adapters.providers.tools import CONNECT_TIMEOUT_CAP


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
    """A tool call failed at the protocol level (a JSON-RPC error, not a result with isError).

    When the provider itself sent the error, `code` is its JSON-RPC error code and `said` its message (shortened;
    scrubbed of the credentials like `.message`); both are None when the SDK made the error up (a bad answer)."""

    def __init__(self, message: str, *, code: int | None = None, said: str | None = None):
        super().__init__(message)
        self.code = code
        self.said = said


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
    exc: BaseException,
    error_status: int | None,
    timeout: float,
    calling: str | None,
    secrets: list[str] | None = None,
) -> ProviderError:
    """The ProviderError for what the SDK/httpx raised; the provider's own words are scrubbed of `secrets` before they
    are shortened (so no part of a credential is left at the cut)."""
    chain = list(_walk(exc))
    status = error_status
    for item in chain:
        if isinstance(item, httpx2.HTTPStatusError) and status is None:
            status = item.response.status_code

    def first(kind: type[BaseException] | tuple[type[BaseException], ...]) -> Any:
        return next((item for item in chain if isinstance(item, kind)), None)

    if status in (401, 403):
        return ProviderAuthRejected(status)
    if status is not None:
        # A JSON-RPC error in the body of an HTTP error answer is the provider's own word (the SDK reads it): say it.
        mcp_error = first(MCPError)
        if calling is not None and mcp_error is not None and not _made_up_by_the_sdk(mcp_error):
            return _translate_mcp_error(mcp_error, calling, timeout, secrets or [], status)
        return ProviderUnavailable(f"the server answered HTTP {_status_text(status)}")

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
        return _translate_mcp_error(mcp_error, calling, timeout, secrets or [])
    if first(ValidationError) is not None:
        return ProviderUnavailable("the server did not answer like an MCP server")
    runtime = first(RuntimeError)
    if runtime is not None and "protocol version" in str(runtime):
        return ProviderUnavailable("the server speaks an MCP protocol version Switchboard does not support")
    return ProviderUnavailable(f"unexpected error ({type(_leaf(exc)).__name__})")


TOO_LARGE_MARK = "switchboard: answer larger than"
# The SDK's own bound on one server-sent event (`max_sse_event_size`, 1 MiB): an SSE answer past it ends the same way.
SDK_EVENT_TOO_LARGE = r"Server-sent event exceeded the (\d+) byte limit"


class AnswerTooLarge(httpx2.StreamError, httpx2.SSEError):
    """A provider's HTTP answer passed `PROVIDER_MAX_RESPONSE_BYTES`: reading stops there. The SDK reports it with
    this message inside, as a parse error (a JSON answer) or a failed stream (an SSE answer)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        super().__init__(f"{TOO_LARGE_MARK} {limit} bytes")


def too_large_message(limit: int, calling: str | None = None) -> str:
    size = f"{limit / 1024 / 1024:g} MiB"
    if calling is None:
        return f"The provider's answer was larger than {size}, so Switchboard stopped reading it."
    return (
        f"The provider's answer was larger than {size}, so Switchboard stopped reading it. "
        "Ask the tool for less, for example a narrower query or one page at a time."
    )


# What the SDK's Streamable HTTP client reports for an HTTP error answer whose body is not a JSON-RPC error (mcp 2.x
# `_handle_post_request`): not the provider's words, so the HTTP status is the better account.
_SDK_STAND_INS = {
    (mcp_types.INTERNAL_ERROR, "Server returned an error response"),
    (mcp_types.METHOD_NOT_FOUND, "Not Found"),
    (mcp_types.INVALID_REQUEST, "Session terminated"),
}
# The most of a provider's error message an agent is shown.
PROVIDER_MESSAGE_LIMIT = 500


def _made_up_by_the_sdk(error: MCPError) -> bool:
    return (error.code, error.message) in _SDK_STAND_INS


def _translate_mcp_error(
    error: MCPError, calling: str | None, timeout: float, secrets: list[str], status: int | None = None
) -> ProviderError:
    code = error.code
    too_large = re.search(TOO_LARGE_MARK + r" (\d+) bytes", error.message or "") or re.search(
        SDK_EVENT_TOO_LARGE, error.message or ""
    )
    if too_large:
        message = too_large_message(int(too_large.group(1)), calling)
        return ProviderToolError(message) if calling is not None else ProviderError(message)
    if code == mcp_types.CONNECTION_CLOSED:
        if calling is not None:
            # The provider was reached (a transport that failed is reported as that failure, `send_pooled`): it hung
            # up on this call without a result or an error.
            return ProviderError(
                f"The provider closed the call to {calling!r} without answering it (no result and no error); "
                "the tool may have run."
            )
        return ProviderUnavailable("the connection closed before the server answered")
    if code == mcp_types.REQUEST_TIMEOUT:
        return ProviderTimeout(timeout)
    if code in (mcp_types.PARSE_ERROR, mcp_types.INVALID_REQUEST) and calling is None:
        return ProviderUnavailable("the server did not answer like an MCP server")
    if calling is not None:
        said = _short(_scrub(error.message, secrets), PROVIDER_MESSAGE_LIMIT)
        how = f"MCP error {code}" + (f", HTTP {_status_text(status)}" if status is not None else "")
        return ProviderToolError(
            f"The provider could not run the tool {calling!r}: {said} ({how})", code=code, said=said
        )
    return ProviderUnavailable(
        f"the server answered with an MCP error: {_short(_scrub(error.message, secrets))}"
    )


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
