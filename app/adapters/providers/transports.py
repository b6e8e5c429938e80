"""The two MCP transports Switchboard speaks to providers, opened the same way for a one-off exchange and for a
pooled session.

A method's `transport` (`app.catalog.schema.Transport`) picks one:

- `mcp_remote`: Streamable HTTP (`streamable_http_client`), every message a POST to the server URL;
- `sse`: the older HTTP+SSE transport (`sse_client`), for providers that offer only it: a GET event stream that
  names a message endpoint, then every message POSTed there and every answer read from the stream.

Either way the HTTP client is the caller's (`mcp_client._Exchange.http_client`): its headers, timeouts, outbound
guard (pinned transport) and response hook (which records the first error status) apply to every request the SDK
makes, the event stream's GET included. The SSE client also refuses a message endpoint on another origin than the
server URL (the SDK checks it), so the guard's pinned addresses cover the POSTs too.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import httpx2
from mcp.client.sse import sse_client
from mcp.client.streamable_http import streamable_http_client

from app.catalog.schema import Transport

# How long an SSE event stream may stay silent before the client gives up on it. The stream outlives single calls:
# a pooled session keeps it open while idle (`session_pool.IDLE_SECONDS`), so the call timeout would be too
# short. Each exchange still runs under its own overall deadline. Same value as the SDK's default.
SSE_READ_TIMEOUT = 300.0

Streams = tuple[Any, Any]
# Builds the exchange's HTTP client; `stream_read_timeout` (seconds) overrides the read timeout for a long-lived
# event stream.
ClientFactory = Callable[..., httpx2.AsyncClient]


@asynccontextmanager
async def open_streams(transport: Transport, url: str, http_client: ClientFactory) -> AsyncIterator[Streams]:
    """The read and write streams of one MCP connection to `url` over `transport`; the HTTP client opens and
    closes with them."""
    if transport == "sse":

        def factory(
            headers: dict[str, str] | None = None,
            timeout: httpx2.Timeout | None = None,
            auth: httpx2.Auth | None = None,
        ) -> httpx2.AsyncClient:
            # The SDK's own headers and timeout are not used: the exchange's client already carries ours.
            return http_client(stream_read_timeout=SSE_READ_TIMEOUT)

        async with sse_client(url, httpx_client_factory=factory) as (read, write):
            yield read, write
    else:
        async with http_client() as http, streamable_http_client(url, http_client=http) as (read, write):
            yield read, write
