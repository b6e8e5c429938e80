"""Gateway MCP sessions (2025-x revisions): what one client declared at `initialize`, kept by that client.

Several clients may share one run token (an agent and its sub-agents, two tools of one CLI), and each must be served
by its own capabilities ("MUST NOT send elicitation requests with modes that are not supported"). The only thing the
gateway needs to remember of a client is the elicitation modes it declared, so a client that declared some gets an
`Mcp-Session-Id` at `initialize` that carries them, and sends it back on every request (Streamable HTTP). A client that
declared none gets no session id and stays sessionless, as every gateway client was before. A 2026-07-28 request
carries the client's capabilities itself and needs none of this.

The gateway keeps no server-side state for it, so any server process can read a session: the id is
`<modes>.<nonce>.<tag>`, the declared modes (`form-url`), a random nonce (two clients never share an id) and an HMAC
tag (keyed from `SECRET_KEY`) over the run, the modes and the nonce. A client cannot claim a capability by editing its
id, nor carry one to another run. An id that does not verify is a session this server does not know: HTTP 404 with a
JSON-RPC error (MCP "Session Management"), after which the client starts a new one with `initialize`.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
import uuid

from flask import current_app, g, request
from mcp_types.jsonrpc import INVALID_REQUEST

from app.core import mcp_messages, mcp_versions
from app.web.agents.jsonrpc import Reply
from app.web.json_body import BodyNotJson, read_json_body

HEADER = "Mcp-Session-Id"
NOT_FOUND = "Session not found"
_MODES = ("form", "url")
_TAG_BYTES = 16


def _tag(run_id: uuid.UUID | str, modes: str, nonce: str) -> str:
    key = hmac.new(
        str(current_app.config["SECRET_KEY"]).encode(), b"switchboard-gateway-session", hashlib.sha256
    ).digest()
    digest = hmac.new(key, f"{run_id}\n{modes}\n{nonce}".encode(), hashlib.sha256).digest()[:_TAG_BYTES]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def opened(run_id: uuid.UUID | str, modes: list[str] | None) -> dict[str, str]:
    """The headers of an `initialize` answer: a session id carrying `modes` when the client declared any."""
    if not modes:
        return {}
    declared = "-".join(mode for mode in _MODES if mode in modes)
    nonce = secrets.token_urlsafe(16)
    return {HEADER: f"{declared}.{nonce}.{_tag(run_id, declared, nonce)}"}


def _verified_modes(run_id: str, session_id: str) -> list[str] | None:
    parts = session_id.split(".")
    if len(parts) != 3:
        return None
    declared, nonce, tag = parts
    modes = declared.split("-")
    if not nonce or any(mode not in _MODES for mode in modes):
        return None
    return modes if hmac.compare_digest(tag, _tag(run_id, declared, nonce)) else None


def check(run_id: str) -> Reply | None:
    """Read the request's session (once per request), or the 404 that refuses an id this server did not issue for
    this run. An `initialize` starts a new session whatever it carries, and a 2026-07-28 request has none."""
    g.gateway_session_modes = None
    session_id = request.headers.get(HEADER)
    if session_id is None or request.headers.get("MCP-Protocol-Version") in mcp_versions.MODERN:
        return None
    try:
        body = read_json_body()
    except BodyNotJson:
        body = None
    if isinstance(body, dict) and body.get("method") == "initialize":
        return None
    modes = _verified_modes(run_id, session_id)
    if modes is None:
        id_ = body.get("id") if isinstance(body, dict) else None
        return mcp_messages.error(id_, INVALID_REQUEST, NOT_FOUND), 404
    g.gateway_session_modes = modes
    return None


def declared_modes() -> list[str]:
    """The elicitation modes the client of this request declared at its `initialize` (empty: none, or no session)."""
    return list(g.get("gateway_session_modes") or [])
