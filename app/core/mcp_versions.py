"""The MCP protocol revisions Switchboard speaks: the one place that names them.

Legacy revisions open with an `initialize` handshake; modern ones (2026-07-28 and later) carry the version, client
info and capabilities in every request's `_meta` and mirror them in HTTP headers. The runtime door speaks the seed
contract's revision only; the tool gateway negotiates (see `app.web.agents.negotiation`).
"""

from __future__ import annotations

import mcp_types

# The seed contract's revision: what `/mcp/runtime-tools` answers, and what a request without an
# `MCP-Protocol-Version` header is taken to speak (2025-06-18 "Protocol Version Header").
BASELINE = "2025-03-26"
LEGACY = (BASELINE, "2025-06-18", "2025-11-25")
MODERN = ("2026-07-28",)
SUPPORTED = (*LEGACY, *MODERN)
# What `initialize` answers when the client asks for a revision we do not speak: our newest handshake revision.
LATEST_LEGACY = LEGACY[-1]
# Revisions whose transport carries JSON-RPC batches (2025-06-18 removed them).
WITH_BATCHES = (BASELINE,)
# Revisions whose servers prime an SSE response with an event id and empty data, so a client can resume
# (2025-11-25 "Sending Messages to the Server"; 2026-07-28 has no resumable streams).
WITH_PRIMING_EVENT = ("2025-11-25",)

# The `_meta` keys of modern requests and results (2026-07-28 "Per-request protocol fields"), as the SDK names them.
# The JSON-RPC and MCP error codes are the SDK's too: `mcp_types.jsonrpc` (PARSE_ERROR ... UNSUPPORTED_PROTOCOL_VERSION).
META_PROTOCOL_VERSION = mcp_types.PROTOCOL_VERSION_META_KEY
META_CLIENT_CAPABILITIES = mcp_types.CLIENT_CAPABILITIES_META_KEY
META_CLIENT_INFO = mcp_types.CLIENT_INFO_META_KEY
META_SERVER_INFO = mcp_types.SERVER_INFO_META_KEY


def negotiate(requested: object) -> str:
    """The revision an `initialize` answers: the client's when we speak it, else our newest handshake revision."""
    return requested if isinstance(requested, str) and requested in LEGACY else LATEST_LEGACY
