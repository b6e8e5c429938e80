"""The OAuth endpoints MCP clients call (no browser session, no CSRF): token, registration, revocation and device
authorization. Each answers in OAuth's JSON shape; plain HTTP is refused except on loopback."""

from __future__ import annotations

from authlib.common.security import is_secure_transport
from flask import jsonify, request
from flask.typing import ResponseReturnValue

from app.services import login_throttle
from app.services.assistants.cleanup import sweep_expired
from app.services.assistants.server import authorization_server, wants_keeping
from app.web.assistant_oauth import bp, schemas
from app.web.openapi.operations import Answer
from app.web.security import csrf_exempt_endpoint
from app.web.unit_of_work import Reason, commit_point

OAUTH_JSON_PATHS = frozenset({"/token", "/register", "/revoke", "/device_authorization"})


def insecure_transport() -> ResponseReturnValue | None:
    """OAuth 2.1: nothing is issued over plain HTTP, except to and from loopback (local development, tests)."""
    if is_secure_transport(request.url):
        return None
    body = {"error": "invalid_request", "error_description": "HTTPS is required."}
    return jsonify(body), 400


@bp.post("/token")
@schemas.oauth_post(
    "Exchange an authorization code, a refresh token or a device code for tokens",
    Answer("The tokens (the refresh token rotates)", (schemas.TokenAnswer,)),
    "An unknown client is refused (401 `invalid_client`) before anything about its request.",
    schemas.TokenRequest,
)
def token() -> ResponseReturnValue:
    response = insecure_transport() or authorization_server().create_token_response()
    if wants_keeping():
        commit_point(Reason.ASSISTANT_REFUSAL_KEPT)
    return response


def registration_throttled() -> ResponseReturnValue | None:
    """Open registration writes a client row per call: each address registers a bounded number of clients per
    window (the sign-in throttle's shared store), answered 429 with Retry-After in OAuth's JSON shape."""
    try:
        wait = login_throttle.take_registration(request.remote_addr)
    except login_throttle.ThrottleUnavailable:
        wait, status = login_throttle.UNAVAILABLE_RETRY_AFTER_SECONDS, 503
        text = "Client registration is unavailable right now: its counter cannot be reached. Try again in a minute."
    else:
        if wait is None:
            return None
        status = 429
        text = f"Too many client registrations from this address. Try again in {wait} second{'s' if wait != 1 else ''}."
    response = jsonify({"error": "invalid_request", "error_description": text})
    response.status_code = status
    response.headers["Retry-After"] = str(wait)
    return response


@bp.post("/register")
def register() -> ResponseReturnValue:
    refused = insecure_transport() or registration_throttled()
    if refused is not None:
        return refused
    sweep_expired()  # each registration first deletes what has expired (`assistants.cleanup`)
    return authorization_server().create_endpoint_response("client_registration")


@bp.post("/revoke")
@schemas.oauth_post(
    "Revoke an access or refresh token (RFC 7009)",
    Answer("Revoked (or unknown: the answer is the same)"),
    "`token` and optionally `token_type_hint`.",
    schemas.RevocationRequest,
)
def revoke() -> ResponseReturnValue:
    return insecure_transport() or authorization_server().create_endpoint_response("revocation")


@bp.post("/device_authorization")
@schemas.oauth_post(
    "Start a device authorization (RFC 8628)",
    Answer("The device code and the user code to type", (schemas.DeviceAuthorization,)),
    "`client_id`, optionally `scope` and `resource`.",
    schemas.DeviceAuthorizationRequest,
)
def device_authorization() -> ResponseReturnValue:
    return insecure_transport() or authorization_server().create_endpoint_response("device_authorization")


for _endpoint in (token, register, revoke, device_authorization):
    csrf_exempt_endpoint(f"{bp.name}.{_endpoint.__name__}")
