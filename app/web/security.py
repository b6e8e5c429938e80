"""Request security: session or API-key users, CSRF on every state change, and response headers.

CSRF is checked here rather than by CSRFProtect's default hook so that `/api/*` calls authenticated with a bearer API
key (and agent-facing routes with their own bearer tokens) are exempt, while every cookie-authenticated form and htmx
request must carry the token.
"""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

from flask import (
    Flask,
    Request,
    Response,
    g,
    jsonify,
    make_response,
    redirect,
    render_template,
    request,
    url_for,
)
from flask.typing import ResponseReturnValue
from flask_login import current_user
from mcp_types.jsonrpc import INVALID_PARAMS, INVALID_REQUEST
from werkzeug.exceptions import RequestEntityTooLarge

from app.core import mcp_messages
from app.extensions import csrf, db, login_manager
from app.models import User
from app.services import login_throttle
from app.services.accounts import safe_next, user_for_api_key
from app.web.json_body import EMPTY, BodyNotJson, TextProblem, read_json_body, unstorable_text
from app.web.openapi.responses import ErrorResponse, ValidationErrorResponse, respond
from app.web.unit_of_work import Reason, commit_point

UNSAFE_METHODS = {"POST", "PUT", "PATCH", "DELETE"}
# Every HTML page: scripts, styles and requests from this origin only (no inline script, style or handler anywhere in
# the templates; htmx's indicator styles are off and its eval unused), images also as data: URLs (Pico's icons), no
# plugins, no <base>, framed only by this origin. Forms may post anywhere a page of ours sends them (OAuth sign-in
# continues at the provider), so form-action is not limited.
CONTENT_SECURITY_POLICY = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; frame-ancestors 'self'"
)
# Under an https PUBLIC_BASE_URL: browsers use https only, for two years, subdomains included.
STRICT_TRANSPORT_SECURITY = "max-age=63072000; includeSubDomains"
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
    # `User.get_id`: the id and the session generation it was signed in under; an older generation (signed out, or
    # the password changed since) or an id without one (a cookie from before generations) signs no one in.
    id_text, _, epoch = user_id.partition(":")
    try:
        user = db.session.get(User, uuid.UUID(id_text))
    except ValueError:
        return None
    if user is None or not epoch.isdigit() or int(epoch) != user.session_epoch:
        return None
    return user


@login_manager.request_loader
def load_user_from_api_key(req: Request) -> User | None:
    if not req.path.startswith("/api/"):
        return None
    token = bearer_token()
    if not token:
        return None
    user = user_for_api_key(token)
    if user is None:
        login_throttle.record_address_failure(req.remote_addr)  # guessing keys counts per address
    if user is not None:
        g.api_key_user = user
        # On SQLite the pending UPDATE would otherwise hold the write lock for the whole request.
        commit_point(Reason.API_KEY_LAST_USED)
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
def unauthorized() -> ResponseReturnValue:
    if request.path.startswith("/api/"):
        return respond(ErrorResponse(error="Authentication required"), 401)
    login_url = url_for("auth.login", next=_page_to_return_to())
    if request.headers.get("HX-Request"):
        # A redirect would be followed inside the XHR and swap the login page into a fragment's place: ask htmx to
        # navigate the whole window instead, and say why in case it cannot.
        response = make_response(render_template("_error_alert.html", message="Sign in to continue."), 401)
        response.headers["HX-Redirect"] = login_url
        return response
    return redirect(login_url)


JSON_DOOR_PREFIXES = ("/api/", *TOKEN_AUTH_PREFIXES)


def is_mcp_door() -> bool:
    return request.path.startswith("/mcp/")


def origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower()


def is_foreign_origin() -> bool:
    """An `Origin` header is present and names neither PUBLIC_BASE_URL's origin nor an allowed one."""
    from flask import current_app

    origin = request.headers.get("Origin")
    if origin is None:
        return False
    allowed = {origin_of(current_app.config.get("PUBLIC_BASE_URL") or "")}
    allowed.update(o.lower() for o in current_app.config.get("AGENT_ALLOWED_ORIGINS") or [])
    return origin.strip().rstrip("/").lower() not in allowed


def _bearer_challenge() -> str:
    """The 401's challenge. The runtime doors keep their contract (always `error="invalid_token"`); the gateway follows
    RFC 6750 section 3.1 (a request that sent no credentials gets no error code) and names its protected-resource
    metadata (RFC 9728 section 5.1), where an MCP client finds the authorization server to sign in with."""
    if request.path.startswith("/mcp/gateway"):
        from app.services.assistants.urls import resource_metadata_url

        metadata = f'resource_metadata="{resource_metadata_url()}"'
        if not request.headers.get("Authorization"):
            return f"Bearer {metadata}"
        return f'Bearer error="invalid_token", {metadata}'
    return 'Bearer error="invalid_token"'


def request_run_claims() -> dict:
    """The verified claims of the request's run token (checked once per request), else TokenInvalid (401)."""
    from app.services.assistants import access as assistant_access
    from app.services.runs.tokens import TokenInvalid, verify_run_token

    if "run_claims" not in g:
        try:
            token = bearer_token()
            if assistant_access.is_assistant_token(token):
                # An assistant's OAuth access token stands for its session run (`services/assistants/access`).
                g.run_claims = assistant_access.claims_for_access_token(token, request.path)
            else:
                g.run_claims = verify_run_token(token)
        except TokenInvalid:
            if not g.get("run_token_failure_counted"):
                g.run_token_failure_counted = True
                login_throttle.record_address_failure(
                    request.remote_addr
                )  # guessing tokens counts per address
            raise
    return g.run_claims


def _refuse_text(problem: TextProblem) -> ResponseReturnValue:
    """NUL and lone surrogates cannot be stored in PostgreSQL text: refuse them up front, for every door, with a 400."""
    from app.web.errors import error_response

    if is_mcp_door():
        try:
            body = read_json_body()
        except BodyNotJson:
            body = None
        request_id = body.get("id") if isinstance(body, dict) else None
        return jsonify(mcp_messages.error(request_id, INVALID_PARAMS, problem.message)), 400
    if request.path.startswith(JSON_DOOR_PREFIXES):
        return respond(
            ValidationErrorResponse.model_validate(
                {"error": "Validation error", "details": [problem.detail()]}
            ),
            400,
        )
    return error_response(problem.message, 400)


def _body_text_problem() -> TextProblem | None:
    """Check the body the door will read: JSON on the JSON doors (whatever the content type), forms on pages.

    A body that is not JSON is left to the door, which answers it in its own shape (400 `-32700` on MCP doors,
    400 `Validation error` on the others).
    """
    if request.path.startswith(JSON_DOOR_PREFIXES):
        try:
            body = read_json_body()
        except BodyNotJson:
            return None
        return None if body is EMPTY else unstorable_text(body, ("body",))
    if request.is_json:
        return None  # no page reads a JSON body
    return unstorable_text(request.form.to_dict(flat=False), ("form",))


def install_request_security(app: Flask) -> None:
    """Request hooks, in order: body size, then the caller (CSRF, API key or run token), then unstorable text.

    Nothing reads a body before the caller is known, and a body is never read for a path no route serves.
    """

    @app.before_request
    def _refuse_oversized_body() -> ResponseReturnValue | None:
        limit = app.config.get("MAX_CONTENT_LENGTH")
        if limit is not None and (request.content_length or 0) > limit:
            raise RequestEntityTooLarge()  # answered from the Content-Length alone; the body is never read
        return None

    @app.before_request
    def _check_agent_origin() -> ResponseReturnValue | None:
        # MCP transport security: servers MUST validate Origin (DNS rebinding), before anything else.
        if request.path.startswith(TOKEN_AUTH_PREFIXES) and is_foreign_origin():
            message = "Forbidden: this Origin may not call Switchboard's agent doors"
            if is_mcp_door():
                return jsonify(mcp_messages.error(None, INVALID_REQUEST, message)), 403
            return respond(ErrorResponse(error=message), 403)  # the REST runtime doors' own error shape
        return None

    @app.before_request
    def _check_csrf() -> ResponseReturnValue | None:
        if request.method not in UNSAFE_METHODS:
            return None
        if request.url_rule is None:
            return None  # no route serves it: nothing can change, and the 404 (or 405) answers in the door's shape
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
                return respond(ErrorResponse(error="Invalid or revoked API key"), 401)
            if not current_user.is_authenticated:
                return respond(ErrorResponse(error="Authentication required"), 401)
        csrf.protect()
        return None

    @app.before_request
    def _check_run_token() -> ResponseReturnValue | None:
        # Agent doors name their caller by the run token: check it before anything reads the body.
        served = request.url_rule is not None
        if served and request.method in UNSAFE_METHODS and request.path.startswith(TOKEN_AUTH_PREFIXES):
            request_run_claims()
        return None

    @app.before_request
    def _check_unstorable_text() -> ResponseReturnValue | None:
        problem = unstorable_text(request.args.to_dict(flat=False), ("query",))
        if problem is None and request.method in UNSAFE_METHODS and request.url_rule is not None:
            problem = _body_text_problem()
        return _refuse_text(problem) if problem is not None else None

    @app.after_request
    def _security_headers(response: Response) -> Response:
        response.headers.setdefault("X-Content-Type-Options", "nosniff")
        if response.mimetype == "text/html":
            response.headers.setdefault("Content-Security-Policy", CONTENT_SECURITY_POLICY)
        if str(app.config.get("PUBLIC_BASE_URL") or "").lower().startswith("https://"):
            response.headers.setdefault("Strict-Transport-Security", STRICT_TRANSPORT_SECURITY)
        response.headers.setdefault("X-Frame-Options", "SAMEORIGIN")
        response.headers.setdefault("Referrer-Policy", "same-origin")
        if request.headers.get("HX-Request") is not None or response.mimetype == "text/html":
            response.vary.add("HX-Request")
        if request.path.startswith("/api/") or response.mimetype == "text/html":
            response.headers.setdefault("Cache-Control", "no-store")
        if response.status_code == 401 and request.path.startswith(TOKEN_AUTH_PREFIXES):
            response.headers.setdefault("WWW-Authenticate", _bearer_challenge())
        return response
