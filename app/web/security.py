"""Request security: session or API-key users, CSRF on every state change, and response headers.

CSRF is checked here rather than by CSRFProtect's default hook so that `/api/*` calls authenticated with a bearer API
key (and agent-facing routes with their own bearer tokens) are exempt, while every cookie-authenticated form and htmx
request must carry the token.
"""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

from flask import Flask, g, jsonify, make_response, redirect, render_template, request, url_for
from flask_login import current_user

from app.extensions import csrf, db, login_manager
from app.models import User
from app.services.accounts import safe_next, user_for_api_key

UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# Agent-facing routes authenticate with their own bearer tokens and are never driven by a browser session.
TOKEN_AUTH_PREFIXES = ("/mcp/", "/runtime-tools/")
CSRF_EXEMPT_ENDPOINTS: set[str] = set()


def csrf_exempt_endpoint(endpoint: str) -> None:
    CSRF_EXEMPT_ENDPOINTS.add(endpoint)


def bearer_token() -> str:
    header = request.headers.get("Authorization", "")
    scheme, _, token = header.partition(" ")
    return token.strip() if scheme.lower() == "bearer" else ""


def is_api_bearer_request() -> bool:
    return request.path.startswith("/api/") and bool(request.headers.get("Authorization", "").strip())


@login_manager.user_loader
def load_user(user_id: str) -> User | None:
    # An API call that presents a credential is judged by that credential alone: a browser session cookie sent along
    # must neither stand in for an invalid key nor change whom a valid key acts as.
    if is_api_bearer_request():
        return None
    try:
        return db.session.get(User, uuid.UUID(user_id))
    except ValueError:
        return None


@login_manager.request_loader
def load_user_from_api_key(req) -> User | None:
    if not req.path.startswith("/api/"):
        return None
    token = bearer_token()
    if not token:
        return None
    user = user_for_api_key(token)
    if user is not None:
        g.api_key_user = user
        # Commit the key's "last used" now, before the view starts its own unit of work: read-only calls would
        # otherwise roll it back, and on SQLite the pending UPDATE would hold the write lock for the whole request.
        db.session.commit()
    return user


def _page_to_return_to() -> str:
    """Where to go after signing in: the requested page, or for htmx requests the page the fragment belongs to."""
    if request.headers.get("HX-Request"):
        current = urlsplit(request.headers.get("HX-Current-URL", ""))
        if current.netloc == request.host and current.path:
            return safe_next(current.path + (f"?{current.query}" if current.query else ""))
        return "/"
    return safe_next(request.full_path.rstrip("?"))


@login_manager.unauthorized_handler
def unauthorized():
    if request.path.startswith("/api/"):
        return jsonify({"error": "Authentication required"}), 401
    login_url = url_for("auth.login", next=_page_to_return_to())
    if request.headers.get("HX-Request"):
        # A redirect would be followed inside the XHR and swap the login page into a fragment's place: ask htmx to
        # navigate the whole window instead, and say why in case it cannot.
        response = make_response(render_template("_error_alert.html", message="Sign in to continue."), 401)
        response.headers["HX-Redirect"] = login_url
        return response
    return redirect(login_url)


NUL_MESSAGE = "Text must not contain NUL characters"


def _nul_path(value, path: tuple = ()) -> tuple | None:
    """The location of the first string containing U+0000 in parsed JSON or form data, else None."""
    if isinstance(value, str):
        return path if "\x00" in value else None
    if isinstance(value, dict):
        for key, item in value.items():
            if isinstance(key, str) and "\x00" in key:
                return (*path, key)
            found = _nul_path(item, (*path, key))
            if found is not None:
                return found
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found = _nul_path(item, (*path, index))
            if found is not None:
                return found
    return None


def _refuse_nul(location: tuple):
    """NUL cannot be stored in PostgreSQL text: refuse it up front, for every door, with a clear 400."""
    from flask import jsonify

    from app.web.errors import error_response

    detail = {"loc": list(location), "msg": NUL_MESSAGE, "type": "string_nul"}
    if request.path.startswith("/mcp/"):
        body = request.get_json(silent=True)
        request_id = body.get("id") if isinstance(body, dict) else None
        return jsonify(
            {"jsonrpc": "2.0", "id": request_id, "error": {"code": -32602, "message": NUL_MESSAGE}}
        ), 400
    if request.path.startswith(("/api/", "/runtime-tools/")):
        return jsonify({"error": "Validation error", "details": [detail]}), 400
    return error_response(NUL_MESSAGE, 400)


def install_request_security(app: Flask) -> None:
    @app.before_request
    def _check_nul_characters():
        location = _nul_path(request.args.to_dict(flat=False), ("query",))
        if location is None and request.method in UNSAFE_METHODS:
            if request.is_json:
                location = _nul_path(request.get_json(silent=True), ("body",))
            else:
                location = _nul_path(request.form.to_dict(flat=False), ("form",))
        return _refuse_nul(location) if location is not None else None

    @app.before_request
    def _check_csrf():
        if request.method not in UNSAFE_METHODS:
            return None
        if request.path.startswith(TOKEN_AUTH_PREFIXES) or request.endpoint in CSRF_EXEMPT_ENDPOINTS:
            return None
        if request.path.startswith("/api/"):
            # Resolve the caller now: a bearer-authenticated call is exempt only when the key really authenticated it,
            # and an API call nobody authenticated is answered 401 (it could change nothing anyway).
            if is_api_bearer_request():
                if (
                    current_user.is_authenticated
                    and g.get("api_key_user") is current_user._get_current_object()
                ):
                    return None
                return jsonify({"error": "Invalid or revoked API key"}), 401
            if not current_user.is_authenticated:
                return jsonify({"error": "Authentication required"}), 401
        csrf.protect()
        return None

    @app.after_request
    def _security_headers(response):
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        response.headers.setdefault("X-Frame-Options", "SAMEORIGIN")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        if request.headers.get("HX-Request") is not None or response.mimetype == "text/html":
            response.vary.add("HX-Request")
        if request.path.startswith("/api/") or response.mimetype == "text/html":
            response.headers.setdefault("Cache-Control", "no-store")
        return response
