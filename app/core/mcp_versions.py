"""The MCP protocol revisions Switchboard speaks: the one place that names them.

Legacy revisions open with an `initialize` handshake; modern ones (2026-07-28 and later) carry the version, client
info and capabilities in every request's `_meta` and mirror them in HTTP headers. The runtime door speaks the seed
contract's revision only; the tool gateway negotiates (see `app.web.agents.negotiation`).
"""

from __future__ import annotations

# The seed contract's revision: what `/mcp/runtime-tools` answers, and what a request without an
# `MCP-Protocol-Version` header is taken to speak (2025-06-18 "Protocol Version Header").
BASELINE = "2025-03-26"
LEGACY = ("2025-03-26", "2025-06-18", "2025-11-25")
MODERN = ("2026-07-28",)
SUPPORTED = (*LEGACY, *MODERN)
# What `initialize` answers when the client asks for a revision we do not speak: our newest handshake revision.
LATEST_LEGACY = LEGACY[-1]
# Revisions whose transport carries JSON-RPC batches (2025-06-18 removed them).
WITH_BATCHES = ("2025-03-26",)

# The `_meta` keys of modern requests and results (2026-07-28 "Per-request protocol fields").
META_PROTOCOL_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CLIENT_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_CLIENT_INFO = "io.modelcontextprotocol/clientInfo"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"

# Error codes the 2026-07-28 revision defines (basic/index "Error Codes").
HEADER_MISMATCH = -32020
MISSING_REQUIRED_CLIENT_CAPABILITY = -32021
UNSUPPORTED_PROTOCOL_VERSION = -32022


def negotiate(requested: object) -> str:
    """The revision an `initialize` answers: the client's when we speak it, else our newest handshake revision."""
    return requested if isinstance(requested, str) and requested in LEGACY else LATEST_LEGACY
