"""Guessing is limited per client address: a request that presents a credential (an API key on `/api/`,
anything on the agent doors) from an address with too many recent failed authentications is answered 429 with
Retry-After before its credential is checked. The count itself (`app/services/login_throttle.py`) is shared with
sign-in, whose page says the same thing its own way (`accounts.authenticate`).

Registered before the request-security hooks, so a throttled address never reaches the API-key lookup or the run
token check. Below the limit nothing changes: a bad credential is 401 (or 403) as before. When the count's store
cannot be reached, such a request is answered 503 before its credential is checked (a guess is never uncounted).
"""

from __future__ import annotations

from flask import Flask, Response, request
from flask.typing import ResponseReturnValue
from mcp_types.jsonrpc import INVALID_REQUEST

from app.core import mcp_messages, metrics
from app.extensions import current_app_object
from app.services import login_throttle

AGENT_DOOR_PREFIXES = ("/mcp/", "/runtime-tools/")


def throttled_message(wait: int) -> str:
    return (
        "Too many failed authentication attempts from this address. "
        f"Try again in {wait} second{'s' if wait != 1 else ''}."
    )


def presents_credential() -> bool:
    if request.path.startswith(AGENT_DOOR_PREFIXES):
        return True
    return request.path.startswith("/api/") and bool(request.headers.get("Authorization", "").strip())


def refusal(message: str, status: int, wait: int) -> ResponseReturnValue:
    """The door's own error shape (a JSON-RPC error on the MCP doors) with Retry-After."""
    from app.web.agents.jsonrpc import respond
    from app.web.errors import error_response

    if request.path.startswith("/mcp/"):
        response = respond((mcp_messages.error(None, INVALID_REQUEST, message), status))
    else:
        response = current_app_object().make_response(error_response(message, status))
    response.headers["Retry-After"] = str(wait)
    metrics.count_throttle_refusal("agent" if request.path.startswith(AGENT_DOOR_PREFIXES) else "web", status)
    return response


def throttled_response(wait: int) -> ResponseReturnValue:
    return refusal(throttled_message(wait), 429, wait)


def install(app: Flask) -> None:
    @app.before_request
    def _refuse_guessing_address() -> Response | ResponseReturnValue | None:
        if not presents_credential():
            return None
        try:
            wait = login_throttle.address_retry_after(request.remote_addr)
        except login_throttle.ThrottleUnavailable as err:
            return refusal(err.message, err.status, err.retry_after)  # never checked uncounted
        return throttled_response(wait) if wait is not None else None
