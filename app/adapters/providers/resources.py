"""Reading a provider's resource (`resources/read`) on the pooled session, as `mcp_client.call_tool` calls a tool.

The gateway reads a resource a provider pointed an agent at (a `resource_link` in a tool result). The read goes the
same way as a tool call: the provider's bulkhead and breaker, the outbound guard, the pooled session, one overall
deadline. What the provider answers passes through as it said it (`contents` with `text` or `blob`, `_meta`). A
JSON-RPC error the provider itself answered (its resource is not found, say) is a `ProviderRefused` carrying its
code and its words, scrubbed of the credential; every other failure is a `ProviderError` in plain words.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types
from mcp.shared.exceptions import MCPError

from app.adapters.providers import limits as provider_limits
from app.adapters.providers import mcp_client, session_pool
from app.adapters.providers.errors import ProviderError, _scrub
from app.catalog.schema import Transport


class ProviderRefused(ProviderError):
    """The provider answered the request with a JSON-RPC error: its code, its (scrubbed) message and data."""

    def __init__(self, code: int, message: str, data: Any = None):
        super().__init__(message)
        self.code = code
        self.data = data


def read_resource(
    server_url: str,
    *,
    headers: dict[str, str] | None = None,
    uri: str,
    timeout: float = 30.0,
    guard: frozenset[str] | None = None,
    limits: provider_limits.Limits | None = None,
    transport: Transport = "mcp_remote",
    max_response_bytes: int = mcp_client.DEFAULT_MAX_RESPONSE_BYTES,
) -> dict:
    """Read `uri` at the provider. Returns `{"contents": [...], "_meta"?: ...}` as the provider said it.

    Raises ProviderRefused for the provider's own JSON-RPC error, ProviderError (busy, paused, timeout,
    unreachable, rejected credentials) otherwise.
    """
    exchange = mcp_client._Exchange(server_url, headers, timeout, guard, transport, max_response_bytes)
    return mcp_client._on_loop(mcp_client.run_limited(exchange, limits, lambda: _read_once(exchange, uri)))


async def _read_once(exchange: mcp_client._Exchange, uri: str) -> dict:
    key = session_pool.key_for(
        exchange.server_url, exchange.headers, exchange.guard, exchange.timeout, exchange.transport
    )
    request = mcp_types.ReadResourceRequest(params=mcp_types.ReadResourceRequestParams(uri=uri))
    try:
        with anyio.fail_after(exchange.timeout):
            result = await mcp_client.send_pooled(
                exchange, key, request, mcp_types.ReadResourceResult, None, None
            )
    except ProviderError:
        raise
    except MCPError as exc:
        if exchange.error_status is None and mcp_client.answered(exc):
            message = _scrub(str(exc.message), exchange.secrets)
            raise ProviderRefused(exc.code, message, exc.data) from None
        raise exchange.translate(exc) from None
    except Exception as exc:
        raise exchange.translate(exc) from None
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)
