"""Error answers: JSON for API and agent routes, a page (or fragment) for people."""

from __future__ import annotations

from flask import Flask, current_app, render_template, request
from flask.typing import ResponseReturnValue
from flask_wtf.csrf import CSRFError
from mcp_types.jsonrpc import INVALID_REQUEST
from werkzeug.exceptions import HTTPException, MethodNotAllowed

from app.core import mcp_messages
from app.core.errors import ServiceError
from app.web.api.validation import BodyValidationError, validation_error_response
from app.web.openapi.responses import ErrorResponse, respond

# /.well-known/: clients probing for OAuth metadata must get a JSON 404 they can parse, not an HTML page.
JSON_PREFIXES = ("/api/", "/runtime-tools/", "/mcp/", "/healthz", "/readyz", "/.well-known/")
STANDARD_MESSAGES = {
    400: "Bad request",
    401: "Authentication required",
    403: "Forbidden",
    404: "Not found",
    405: "Method not allowed",
    413: "Request too large",
    429: "Too many requests",
}


# A page's title and heading in words (a status number tells a person nothing; the alert says what happened).
PAGE_TITLES = {
    400: "Request not understood",
    401: "Sign in needed",
    403: "Not allowed",
    404: "Page not found",
    405: "Not possible here",
    409: "Not possible right now",
    413: "Too much at once",
    422: "Could not do that",
    429: "Too many requests",
    503: "Unavailable for a moment",
}


# The assistants' authorization server's endpoints that clients (not people) call: their errors are JSON.
OAUTH_DEFAULT_PATHS = frozenset({"/register", "/token", "/revoke", "/device_authorization"})


def wants_json() -> bool:
    return request.path.startswith(JSON_PREFIXES) or request.path in OAUTH_DEFAULT_PATHS


def error_response(message: str, status: int) -> ResponseReturnValue:
    if wants_json():
        return respond(ErrorResponse(error=message), status)
    if request.headers.get("HX-Request"):
        return render_template("_error_alert.html", message=message), status
    title = PAGE_TITLES.get(status, "Something went wrong")
    return render_template("error.html", message=message, status=status, title=title), status


def too_large_response() -> ResponseReturnValue:
    """413 for a body over MAX_CONTENT_LENGTH: a JSON-RPC error on the MCP doors, the usual error shape elsewhere."""
    from app.web.agents.jsonrpc import respond

    limit = current_app.config.get("MAX_CONTENT_LENGTH")
    message = f"Request body too large (at most {limit} bytes)"
    if request.path.startswith("/mcp/"):
        return respond((mcp_messages.error(None, INVALID_REQUEST, message), 413))
    return error_response(message, 413)


GATEWAY_PATH = "/mcp/gateway"
# JSON-RPC has no code for "not authorized"; MCP servers commonly use this one from the implementation-defined range.
NOT_AUTHORIZED = -32001


def gateway_refusal(message: str, status: int) -> ResponseReturnValue:
    """A token or run refusal on the gateway: the status stays (clients stop), the body is a JSON-RPC error, so every
    MCP client shows the reason rather than "Server returned an error response". The body is never read for it, so
    the id is null. (The runtime door keeps its contracted `{"error": ...}` body.)"""
    from app.web.agents.jsonrpc import respond

    return respond((mcp_messages.error(None, NOT_AUTHORIZED, message), status))


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(ServiceError)
    def _service_error(err: ServiceError) -> ResponseReturnValue:
        from app.extensions import db

        db.session.rollback()
        if err.status in (401, 403) and request.path.startswith(GATEWAY_PATH):
            return gateway_refusal(err.message, err.status)
        return error_response(err.message, err.status)

    @app.errorhandler(BodyValidationError)
    def _validation_error(err: BodyValidationError) -> ResponseReturnValue:
        return validation_error_response(err)

    @app.errorhandler(CSRFError)
    def _csrf_error(err: CSRFError) -> ResponseReturnValue:
        return error_response(
            "The form expired or is missing its security token. Reload the page and try again.", 400
        )

    @app.errorhandler(HTTPException)
    def _http_error(err: HTTPException) -> ResponseReturnValue:
        status = err.code or 500
        message = STANDARD_MESSAGES.get(status, err.name)
        if status == 413:
            return too_large_response()
        response = app.make_response(error_response(message, status))
        if isinstance(err, MethodNotAllowed) and err.valid_methods:
            response.headers["Allow"] = ", ".join(err.valid_methods)
        return response
