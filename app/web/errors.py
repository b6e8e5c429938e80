"""Error answers: JSON for API and agent routes, a page (or fragment) for people."""

from __future__ import annotations

from flask import Flask, current_app, jsonify, render_template, request
from flask.typing import ResponseReturnValue
from flask_wtf.csrf import CSRFError
from werkzeug.exceptions import HTTPException, MethodNotAllowed

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


def wants_json() -> bool:
    return request.path.startswith(JSON_PREFIXES)


def error_response(message: str, status: int) -> ResponseReturnValue:
    if wants_json():
        return jsonify({"error": message}), status
    if request.headers.get("HX-Request"):
        return render_template("_error_alert.html", message=message), status
    return render_template("error.html", message=message, status=status), status


def too_large_response() -> ResponseReturnValue:
    """413 for a body over MAX_CONTENT_LENGTH: a JSON-RPC error on the MCP doors, the usual error shape elsewhere."""
    from app.web.agents.jsonrpc import rpc

    limit = current_app.config.get("MAX_CONTENT_LENGTH")
    message = f"Request body too large (at most {limit} bytes)"
    if request.path.startswith("/mcp/"):
        return rpc(None, error={"code": -32600, "message": message}, status=413)
    return error_response(message, 413)


def register_error_handlers(app: Flask) -> None:
    @app.errorhandler(ServiceError)
    def _service_error(err: ServiceError) -> ResponseReturnValue:
        from app.extensions import db

        db.session.rollback()
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
