"""The assistants' authorization server, on Authlib's server side.

- Authorization code with PKCE, S256 only, required for every client (`S256Only`).
- RFC 8707: the `resource` named at /authorize (absent: the gateway) must be the gateway; a token request that names
  a resource must name the code's. The resource is stored on every token, and the gateway accepts only its own.
- Access tokens live `access_ttl()` seconds (a setting); refresh tokens rotate on every use, and a rotated one presented again
  revokes its whole family (every token descended from the same code or device approval). A reused code does the same.
- The device authorization grant (RFC 8628) for CLIs; dynamic client registration (RFC 7591) and revocation
  (RFC 7009, revoking the whole family) in `oauth_endpoints`; what Authlib sees of the rows in `oauth_objects`.

Authlib refuses any request whose URL is not https or loopback http (`InsecureTransportError`); the doors check the
same before anything else (`app.web.assistant_oauth`). Refusals that must persist although the answer is an error
(a family revoked for reuse, a device poll) set `must_keep()`, which the token door commits.
"""

from __future__ import annotations

from datetime import timedelta

from authlib.common.urls import add_params_to_uri
from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import grants
from authlib.oauth2.rfc6749.errors import InvalidClientError, InvalidRequestError
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc8628 import DeviceCodeGrant
from flask import Flask, current_app
from sqlalchemy import select

from app.extensions import db
from app.models.assistants import AssistantCode, AssistantDeviceCode, AssistantGrant, AssistantToken
from app.models.base import as_utc, utcnow
from app.services.assistants import clients, secrets, urls
from app.services.assistants.cleanup import sweep_expired
from app.services.assistants.oauth_endpoints import DeviceEndpoint, Registration, Revocation
from app.services.assistants.oauth_objects import (
    AUTH_METHODS,
    CODE_TTL,
    DeviceCredential,
    IssuedCode,
    IssuedToken,
    OAuthClient,
    access_ttl,
    check_resource,
    live_grant,
    must_keep,
    refresh_ttl,
    revoke_family,
    wants_keeping,
)

__all__ = ["authorization_server", "init_server", "wants_keeping"]

# --- grants -------------------------------------------------------------------------------------------------------


class S256Only(CodeChallenge):
    """PKCE for every client, S256 only (OAuth 2.1; the MCP authorization rules)."""

    SUPPORTED_CODE_CHALLENGE_METHOD = ["S256"]

    def validate_code_challenge(self, grant, redirect_uri):  # type: ignore[no-untyped-def]
        data = grant.request.payload.data
        if not data.get("code_challenge"):
            raise InvalidRequestError("Missing 'code_challenge': PKCE with S256 is required.")
        if data.get("code_challenge_method") != "S256":
            raise InvalidRequestError("Unsupported 'code_challenge_method': only S256 is accepted.")
        super().validate_code_challenge(grant, redirect_uri)

    def validate_code_verifier(self, grant, result):  # type: ignore[no-untyped-def]
        if not grant.request.form.get("code_verifier"):
            raise InvalidRequestError("Missing 'code_verifier'")
        super().validate_code_verifier(grant, result)


class CodeGrant(grants.AuthorizationCodeGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS

    def validate_authorization_request(self) -> str:
        redirect_uri = super().validate_authorization_request()
        check_resource(self.request.payload.data.get("resource"), redirect_uri=redirect_uri)
        return redirect_uri

    def create_authorization_response(self, redirect_uri: str, grant_user):  # type: ignore[no-untyped-def]
        status, body, headers = super().create_authorization_response(redirect_uri, grant_user)
        # RFC 9207: the issuer in the response, so a client can tell which server answered.
        located = [(name, add_params_to_uri(value, [("iss", urls.issuer())])) for name, value in headers]
        return status, body, located

    def save_authorization_code(self, code: str, request) -> None:  # type: ignore[no-untyped-def]
        data = request.payload.data
        sweep_expired()
        db.session.add(
            AssistantCode(
                code_hash=secrets.digest(code),
                grant_id=request.user.id,
                client_id=request.client.get_client_id(),
                redirect_uri=request.payload.redirect_uri or "",
                scope=request.scope or urls.SCOPE,
                resource=check_resource(data.get("resource")),
                code_challenge=data["code_challenge"],
                code_challenge_method=data["code_challenge_method"],
                expires_at=utcnow() + CODE_TTL,
            )
        )
        db.session.flush()

    def query_authorization_code(self, code: str, client: OAuthClient) -> IssuedCode | None:
        row = db.session.scalars(
            select(AssistantCode).filter_by(code_hash=secrets.digest(code))
        ).one_or_none()
        if row is None or row.client_id != client.get_client_id():
            return None
        if row.used_at is not None:
            # RFC 6749 4.1.2: a code used twice revokes what it gave.
            revoke_family(row.id)
            must_keep()
            return None
        if as_utc(row.expires_at) <= utcnow():
            return None
        return IssuedCode(row)

    def validate_token_request(self) -> None:
        super().validate_token_request()
        code: IssuedCode = self.request.authorization_code
        check_resource(self.request.form.get("resource"), expected=code.row.resource)

    def delete_authorization_code(self, authorization_code: IssuedCode) -> None:
        authorization_code.row.used_at = utcnow()

    def authenticate_user(self, authorization_code: IssuedCode) -> AssistantGrant | None:
        return live_grant(authorization_code.row.grant_id)


class RefreshGrant(grants.RefreshTokenGrant):
    TOKEN_ENDPOINT_AUTH_METHODS = AUTH_METHODS
    INCLUDE_NEW_REFRESH_TOKEN = True

    def authenticate_refresh_token(self, refresh_token: str) -> IssuedToken | None:
        row = db.session.scalars(
            select(AssistantToken).filter_by(refresh_token_hash=secrets.digest(refresh_token))
        ).one_or_none()
        if row is None or row.revoked_at is not None:
            return None
        if row.rotated_at is not None:
            # Reuse of a rotated refresh token: someone holds a copy. End the whole family.
            revoke_family(row.family_id)
            must_keep()
            return None
        if row.refresh_expires_at is None or as_utc(row.refresh_expires_at) <= utcnow():
            return None
        return IssuedToken(row, "refresh_token")

    def validate_token_request(self) -> None:
        super().validate_token_request()
        token: IssuedToken = self.request.refresh_token
        check_resource(self.request.form.get("resource"), expected=token.row.resource)

    def authenticate_user(self, refresh_token: IssuedToken) -> AssistantGrant | None:
        return live_grant(refresh_token.row.grant_id)

    def revoke_old_credential(self, refresh_token: IssuedToken) -> None:
        refresh_token.row.rotated_at = utcnow()


class DeviceGrant(DeviceCodeGrant):
    def query_device_credential(self, device_code: str) -> DeviceCredential | None:
        row = db.session.scalars(
            select(AssistantDeviceCode).filter_by(device_code_hash=secrets.digest(device_code))
        ).one_or_none()
        return DeviceCredential(row) if row is not None and row.used_at is None else None

    def query_user_grant(self, user_code: str) -> tuple[AssistantGrant | None, bool] | None:
        row = db.session.scalars(select(AssistantDeviceCode).filter_by(user_code=user_code)).one_or_none()
        if row is None:
            return None
        if row.denied_at is not None:
            return None, False
        grant = live_grant(row.grant_id)
        return (grant, True) if grant is not None else None

    def should_slow_down(self, credential: DeviceCredential) -> bool:
        row = credential.row
        now = utcnow()
        last = as_utc(row.last_polled_at)
        row.last_polled_at = now
        must_keep()
        return last is not None and (now - last).total_seconds() < row.interval

    def create_token_response(self):  # type: ignore[no-untyped-def]
        result = super().create_token_response()
        self.request.credential.row.used_at = utcnow()
        return result


# --- the server ---------------------------------------------------------------------------------------------------


def _query_client(client_id: str) -> OAuthClient | None:
    try:
        row = clients.find_client(client_id)
    except clients.ClientRefused:
        return None  # Authlib answers invalid_client; the consent page says why (it asks `clients` first)
    return OAuthClient(row) if row is not None else None


def _save_token(token: dict, request) -> None:  # type: ignore[no-untyped-def]
    """Store one issuance (hashed) in its family: a new family for a code or device approval, the same family for
    a refresh."""
    grant: AssistantGrant = request.user
    if getattr(request, "refresh_token", None) is not None:
        parent = request.refresh_token.row
        family_id, resource = parent.family_id, parent.resource
    elif getattr(request, "authorization_code", None) is not None:
        family_id, resource = request.authorization_code.row.id, request.authorization_code.row.resource
    else:
        device = request.credential.row
        family_id, resource = device.id, device.resource
    now = utcnow()
    refresh = token.get("refresh_token")
    db.session.add(
        AssistantToken(
            grant_id=grant.id,
            family_id=family_id,
            client_id=request.client.get_client_id(),
            access_token_hash=secrets.digest(token["access_token"]),
            refresh_token_hash=secrets.digest(refresh) if refresh else None,
            scope=token.get("scope") or urls.SCOPE,
            resource=resource,
            access_expires_at=now + timedelta(seconds=int(token.get("expires_in") or access_ttl())),
            refresh_expires_at=now + refresh_ttl() if refresh else None,
        )
    )
    db.session.flush()


EXTENSION = "assistant_oauth"


def authorization_server() -> AuthorizationServer:
    return current_app.extensions[EXTENSION]


class Server(AuthorizationServer):
    def handle_error_response(self, request, error):  # type: ignore[no-untyped-def]
        # An unknown or unauthenticated client is 401 whatever way it authenticated (RFC 6749 section 5.2 allows it
        # always, and requires it for the Authorization header): one status for "which client are you?", as the
        # document says, and never the 400 of a request's own mistakes.
        if isinstance(error, InvalidClientError):
            error.status_code = 401
        return super().handle_error_response(request, error)


def init_server(app: Flask) -> None:
    """One server per app (Authlib's registries are per instance)."""
    server = Server()
    server.init_app(app, query_client=_query_client, save_token=_save_token)
    app.extensions[EXTENSION] = server
    server.register_token_generator(
        "default",
        BearerTokenGenerator(
            access_token_generator=lambda **_: secrets.new_access_token(),
            refresh_token_generator=lambda **_: secrets.new_refresh_token(),
            expires_generator=lambda client, grant_type: access_ttl(),
        ),
    )
    server.register_grant(CodeGrant, [S256Only(required=True)])
    server.register_grant(RefreshGrant)
    server.register_grant(DeviceGrant)
    server.register_endpoint(DeviceEndpoint)
    server.register_endpoint(Revocation)
    server.register_endpoint(Registration)
