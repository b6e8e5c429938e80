"""Error answers: JSON for API and agent routes, a page (or fragment) for people."""

from __future__ import annotations

from flask import Flask, current_app, jsonify, render_template, request
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException

from app.core.errors import ServiceError
from app.web.api.validation import BodyValidationError, validation_error_response

# /.well-known/: clients probing for OAuth metadata must get a JSON 404 they can parse, not an HTML page.
JSON_PREFIXES = ("/api/", "/runtime-tools/", "/mcp/", "/healthz", "/.well-known/")
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
}


def wants_json() -> bool:
    return request.path.startswith(JSON_PREFIXES)


def error_response(message: str, status: int):
    if wants_json():
        return jsonify({"error": message}), status
    if request.headers.get("HX-Request"):
        return render_template("_error_alert.html", message=message), status
    title = PAGE_TITLES.get(status, "Something went wrong")
    return render_template("error.html", message=message, status=status, title=title), status


def too_large_response():
    """413 for a body over MAX_CONTENT_LENGTH: a JSON-RPC error on the MCP doors, the usual error shape elsewhere."""
    from app.web.agents.jsonrpc import rpc

    limit = current_app.config.get("MAX_CONTENT_LENGTH")
    message = f"Request body too large (at most {limit} bytes)"
    if request.path.startswith("/mcp/"):
        return rpc(None, error={"code": -32600, "message": message}, status=413)
    return error_response(message, 413)


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(ServiceError)
    def _service_error(err: ServiceError):
        from app.extensions import db

        db.session.rollback()
        return error_response(err.message, err.status)

    @app.errorhandler(BodyValidationError)
    def _validation_error(err: BodyValidationError):
        return validation_error_response(err)

    @app.errorhandler(CSRFError)
    def _csrf_error(err: CSRFError):
        return error_response(
            "The form expired or is missing its security token. Reload the page and try again.", 400
        )

    @app.errorhandler(HTTPException)
    def _http_error(err: HTTPException):
        message = STANDARD_MESSAGES.get(err.code, err.name)
        if err.code == 413:
            return too_large_response()
        response = app.make_response(error_response(message, err.code or 500))
        if err.code == 405 and getattr(err, "valid_methods", None):
            response.headers["Allow"] = ", ".join(err.valid_methods)
        return response
