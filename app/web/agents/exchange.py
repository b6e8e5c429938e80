"""What the MCP transport (`jsonrpc`) and the revision negotiation (`negotiation`) both speak in: how one request is
spoken, and a reply. Its own module, so that negotiation reads it without importing the transport that calls it."""

from __future__ import annotations

from dataclasses import dataclass

# A JSON-RPC message to send (None: an empty body) and its HTTP status.
Reply = tuple[dict | list | None, int]


@dataclass(frozen=True)
class Exchange:
    """How one request is spoken: its revision, whether it is modern (2026-07-28), inside a batch, may stream."""

    version: str
    modern: bool = False
    batched: bool = False
    streams: bool = False
