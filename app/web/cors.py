"""CORS for MCP clients that run in a browser (an inspector, a web chat): they read the discovery documents, sign in
at the OAuth endpoints and call the tool gateway from another origin.

Two rules, by what a door trusts:
- The discovery documents and the OAuth endpoints a client calls itself (`/token`, `/register`, `/revoke`,
  `/device_authorization`) never read a cookie: a browser's ambient credentials give nothing there, and what they
  answer is meant for any client. They allow every origin (`*`), never with credentials.
- The tool gateway validates `Origin` before anything else (MCP transport security, DNS rebinding; `security`): a
  foreign origin is refused 403, a preflight too. An origin it accepts (`PUBLIC_BASE_URL`'s, or one listed in
  `SWITCHBOARD_AGENT_ALLOWED_ORIGINS`) is named back, never `*`, and without credentials: its callers send a bearer
  token in a header they set themselves.

A preflight (`OPTIONS` with `Access-Control-Request-Method`) of those paths is answered 204 here with what they
accept; the request that follows is answered by its view with the same headers added. `/authorize` is a page a person's
browser navigates to, so it takes no CORS.
"""

from __future__ import annotations

from flask import Flask, Response, request
from flask.typing import ResponseReturnValue

from app.services.assistants import urls
from app.web.assistant_oauth.endpoints import OAUTH_JSON_PATHS
from app.web.security import is_foreign_origin

GATEWAY = urls.GATEWAY_PATH
MAX_AGE = "600"
OAUTH_METHODS = "GET, POST, OPTIONS"
OAUTH_HEADERS = "Authorization, Content-Type, MCP-Protocol-Version"
GATEWAY_METHODS = "GET, POST, DELETE, OPTIONS"
GATEWAY_HEADERS = "Authorization, Content-Type, Accept, Mcp-Session-Id, MCP-Protocol-Version, Last-Event-ID, Mcp-Method, Mcp-Name"
# What a browser client must be able to read of the gateway's answers: its session, the revision, the 401 challenge.
GATEWAY_EXPOSED = "Mcp-Session-Id, MCP-Protocol-Version, WWW-Authenticate"


def _is_public(path: str) -> bool:
    return path in OAUTH_JSON_PATHS or path.startswith(
        (urls.PROTECTED_RESOURCE_PATH, urls.AUTHORIZATION_SERVER_PATH)
    )


def _cors_headers() -> dict[str, str] | None:
    """The CORS headers this request's answer carries, or None (no `Origin`, another path, or a foreign origin at the
    gateway, which the Origin check has refused already)."""
    origin = request.headers.get("Origin")
    if origin is None:
        return None
    if _is_public(request.path):
        return {
            "Access-Control-Allow-Origin": "*",
            "Access-Control-Expose-Headers": "WWW-Authenticate, Retry-After",
        }
    if request.path == GATEWAY and not is_foreign_origin():
        return {
            "Access-Control-Allow-Origin": origin,
            "Access-Control-Expose-Headers": GATEWAY_EXPOSED,
            "Vary": "Origin",
        }
    return None


def install(app: Flask) -> None:
    """Answer preflights of the covered paths and add the headers to their answers (after the Origin check)."""

    @app.before_request
    def _preflight() -> ResponseReturnValue | None:
        if request.method != "OPTIONS" or "Access-Control-Request-Method" not in request.headers:
            return None
        headers = _cors_headers()
        if headers is None:
            return None  # not ours to allow: the browser gets no CORS headers and stops
        public = _is_public(request.path)
        response = Response(status=204)
        response.headers.update(headers)
        response.headers["Access-Control-Allow-Methods"] = OAUTH_METHODS if public else GATEWAY_METHODS
        response.headers["Access-Control-Allow-Headers"] = OAUTH_HEADERS if public else GATEWAY_HEADERS
        response.headers["Access-Control-Max-Age"] = MAX_AGE
        return response

    @app.after_request
    def _cors(response: Response) -> Response:
        headers = _cors_headers()
        if headers is not None:
            vary = headers.pop("Vary", None)
            response.headers.update(headers)
            if vary is not None:
                response.vary.add(vary)
        return response
