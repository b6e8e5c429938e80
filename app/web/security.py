"""Request security: session or API-key users, CSRF on every state change, and response headers.

CSRF is checked here rather than by CSRFProtect's default hook so that `/api/*` calls authenticated with a bearer API
key (and agent-facing routes with their own bearer tokens) are exempt, while every cookie-authenticated form and htmx
request must carry the token.
"""

from __future__ import annotations

import uuid

from flask import Flask, g, request
from flask_login import current_user

from app.extensions import csrf, db, login_manager
from app.models import User
from app.services.accounts import user_for_api_key

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


@login_manager.user_loader
def load_user(user_id: str) -> User | None:
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
    return user


@login_manager.unauthorized_handler
def unauthorized():
    from flask import jsonify, redirect, url_for

    from app.services.accounts import safe_next

    if request.path.startswith("/api/"):
        return jsonify({"error": "Authentication required"}), 401
    return redirect(url_for("auth.login", next=safe_next(request.full_path.rstrip("?"))))


def install_request_security(app: Flask) -> None:
    @app.before_request
    def _check_csrf():
        if request.method not in UNSAFE_METHODS:
            return None
        if request.path.startswith(TOKEN_AUTH_PREFIXES) or request.endpoint in CSRF_EXEMPT_ENDPOINTS:
            return None
        if request.path.startswith("/api/") and bearer_token():
            # Resolve the key now: a bearer-authenticated call is exempt only when the key really authenticated it.
            if current_user.is_authenticated and g.get("api_key_user") is current_user._get_current_object():
                return None
            if not current_user.is_authenticated:
                from flask import jsonify

                return jsonify({"error": "Invalid or revoked API key"}), 401
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
