"""The assistants' authorization server, on Authlib's server side.

- Authorization code with PKCE, S256 only, required for every client (`S256Only`).
- RFC 8707: the `resource` named at /authorize (absent: the gateway) must be the gateway; a token request that names
  a resource must name the code's. The resource is stored on every token, and the gateway accepts only its own.
- Access tokens live `ACCESS_TTL` seconds; refresh tokens rotate on every use, and a rotated one presented again
  revokes its whole family (every token descended from the same code or device approval). A reused code does the same.
- Dynamic client registration (RFC 7591), revocation (RFC 7009, revoking the whole family), and the device
  authorization grant (RFC 8628) for CLIs.

Authlib refuses any request whose URL is not https or loopback http (`InsecureTransportError`); the doors check the
same before anything else (`app.web.assistant_oauth`). Refusals that must persist although the answer is an error
(a family revoked for reuse, a device poll) set `must_keep()`, which the token door commits.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from authlib.common.urls import add_params_to_uri
from authlib.integrations.flask_oauth2 import AuthorizationServer
from authlib.oauth2.rfc6749 import ClientMixin, grants
from authlib.oauth2.rfc6749.errors import InvalidRequestError, OAuth2Error
from authlib.oauth2.rfc6750 import BearerTokenGenerator
from authlib.oauth2.rfc7009 import RevocationEndpoint
from authlib.oauth2.rfc7591 import ClientRegistrationEndpoint, InvalidRedirectURIError
from authlib.oauth2.rfc7636 import CodeChallenge
from authlib.oauth2.rfc8628 import DeviceAuthorizationEndpoint, DeviceCodeGrant
from flask import Flask, current_app, g
from sqlalchemy import select, update

from app.extensions import db
from app.models.assistants import (
    AssistantClient,
    AssistantCode,
    AssistantDeviceCode,
    AssistantGrant,
    AssistantToken,
)
from app.models.base import as_utc, utcnow
from app.services.assistants import clients, secrets, urls

ACCESS_TTL = 900  # seconds: short-lived; the refresh token carries the session
REFRESH_TTL = timedelta(days=30)
CODE_TTL = timedelta(minutes=5)
DEVICE_TTL = 600
DEVICE_INTERVAL = 5
AUTH_METHODS = ["none", "client_secret_basic", "client_secret_post"]


class InvalidTarget(OAuth2Error):
    """RFC 8707 section 2: the requested resource is not this server's."""

    error = "invalid_target"
    description = "The requested resource is not served by this authorization server."


def must_keep() -> None:
    g.assistant_oauth_keep = True


def wants_keeping() -> bool:
    return bool(g.get("assistant_oauth_keep"))


def check_resource(value: str | None, expected: str | None = None, redirect_uri: str | None = None) -> str:
    """The resource a request names (absent: the gateway); another one raises `invalid_target`."""
    target = expected or urls.gateway_resource()
    if value is not None and value.rstrip("/") != target:
        raise InvalidTarget(redirect_uri=redirect_uri)
    return target


# --- the client, code and token as Authlib sees them ------------------------------------------------------------


@dataclass
class OAuthClient(ClientMixin):
    row: AssistantClient

    def get_client_id(self) -> str:
        return self.row.client_id

    def get_default_redirect_uri(self) -> str | None:
        uris = self.row.redirect_uris or []
        return uris[0] if len(uris) == 1 else None

    def get_allowed_scope(self, scope: str | None) -> str:
        return urls.SCOPE

    def check_redirect_uri(self, redirect_uri: str) -> bool:
        return redirect_uri in (self.row.redirect_uris or [])

    def check_client_secret(self, client_secret: str) -> bool:
        return secrets.matches(client_secret, self.row.client_secret_hash)

    def check_endpoint_auth_method(self, method: str, endpoint: str) -> bool:
        return method == self.row.token_endpoint_auth_method

    def check_response_type(self, response_type: str) -> bool:
        return response_type == "code"

    def check_grant_type(self, grant_type: str) -> bool:
        return grant_type in (self.row.grant_types or [])


@dataclass
class IssuedCode:
    row: AssistantCode

    def get_redirect_uri(self) -> str:
        return self.row.redirect_uri

    def get_scope(self) -> str:
        return self.row.scope

    def get_nonce(self) -> None:
        return None

    def get_auth_time(self) -> int:
        return int(as_utc(self.row.created_at).timestamp())

    @property
    def code_challenge(self) -> str:
        return self.row.code_challenge

    @property
    def code_challenge_method(self) -> str:
        return self.row.code_challenge_method


@dataclass
class IssuedToken:
    row: AssistantToken
    presented: str  # "access_token" or "refresh_token"

    def check_client(self, client: OAuthClient) -> bool:
        return self.row.client_id == client.get_client_id()

    def get_scope(self) -> str:
        return self.row.scope

    def get_expires_in(self) -> int:
        return ACCESS_TTL

    def is_expired(self) -> bool:
        return as_utc(self.row.access_expires_at) <= utcnow()

    def is_revoked(self) -> bool:
        return self.row.revoked_at is not None

    def get_user(self) -> AssistantGrant | None:
        return db.session.get(AssistantGrant, self.row.grant_id)

    def get_client(self) -> OAuthClient | None:
        row = db.session.scalars(select(AssistantClient).filter_by(client_id=self.row.client_id)).first()
        return OAuthClient(row) if row else None


@dataclass
class DeviceCredential:
    row: AssistantDeviceCode

    def get_client_id(self) -> str:
        return self.row.client_id

    def get_scope(self) -> str:
        return self.row.scope

    def get_user_code(self) -> str:
        return self.row.user_code

    def is_expired(self) -> bool:
        return as_utc(self.row.expires_at) <= utcnow()


def revoke_family(family_id: uuid.UUID) -> None:
    db.session.execute(
        update(AssistantToken)
        .where(AssistantToken.family_id == family_id, AssistantToken.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )


def _live_grant(grant_id: uuid.UUID | None) -> AssistantGrant | None:
    grant = db.session.get(AssistantGrant, grant_id) if grant_id else None
    return grant if grant is not None and grant.disconnected_at is None else None


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
        return _live_grant(authorization_code.row.grant_id)


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
        return _live_grant(refresh_token.row.grant_id)

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
        grant = _live_grant(row.grant_id)
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


# --- endpoints ----------------------------------------------------------------------------------------------------


class DeviceEndpoint(DeviceAuthorizationEndpoint):
    CLIENT_AUTH_METHODS = AUTH_METHODS
    EXPIRES_IN = DEVICE_TTL
    INTERVAL = DEVICE_INTERVAL

    def create_endpoint_response(self, request):  # type: ignore[no-untyped-def]
        g.assistant_device_resource = check_resource(request.payload.data.get("resource"))
        return super().create_endpoint_response(request)

    def get_verification_uri(self) -> str:
        return urls.issuer() + "/device"

    def save_device_credential(self, client_id: str, scope: str | None, data: dict) -> None:
        db.session.add(
            AssistantDeviceCode(
                device_code_hash=secrets.digest(data["device_code"]),
                user_code=data["user_code"],
                client_id=client_id,
                scope=scope or urls.SCOPE,
                resource=g.assistant_device_resource,
                interval=data["interval"],
                expires_at=utcnow() + timedelta(seconds=data["expires_in"]),
            )
        )
        db.session.flush()


class Revocation(RevocationEndpoint):
    CLIENT_AUTH_METHODS = AUTH_METHODS

    def query_token(self, token_string: str, token_type_hint: str | None) -> IssuedToken | None:
        digest = secrets.digest(token_string)
        for column, kind in (
            (AssistantToken.access_token_hash, "access_token"),
            (AssistantToken.refresh_token_hash, "refresh_token"),
        ):
            row = db.session.scalars(select(AssistantToken).where(column == digest)).one_or_none()
            if row is not None:
                return IssuedToken(row, kind)
        return None

    def revoke_token(self, token: IssuedToken, request) -> None:  # type: ignore[no-untyped-def]
        revoke_family(token.row.family_id)


class Registration(ClientRegistrationEndpoint):
    """Open registration (MCP clients register themselves); the client is stored with its secret hashed."""

    def authenticate_token(self, request) -> bool:  # type: ignore[no-untyped-def]
        return True

    def get_server_metadata(self) -> dict:
        return urls.authorization_server_metadata()

    def generate_client_id(self, request) -> str:  # type: ignore[no-untyped-def]
        return "sbc_" + secrets.new_secret()[:32]

    def generate_client_secret(self, request) -> str | None:  # type: ignore[no-untyped-def]
        method = request.payload.data.get("token_endpoint_auth_method", "client_secret_basic")
        return None if method == "none" else secrets.new_secret()

    def generate_client_info(self, request) -> dict:  # type: ignore[no-untyped-def]
        info = super().generate_client_info(request)
        if info.get("client_secret") is None:
            info.pop("client_secret", None)
            info.pop("client_secret_expires_at", None)
        return info

    def save_client(self, client_info: dict, client_metadata: dict, request) -> OAuthClient:  # type: ignore[no-untyped-def]
        metadata = dict(client_metadata)
        metadata.setdefault("token_endpoint_auth_method", "client_secret_basic")
        secret = client_info.get("client_secret")
        try:
            row = clients.register_client(
                client_info["client_id"], metadata, secrets.digest(secret) if secret else None
            )
        except clients.ClientRefused as refused:
            raise InvalidRedirectURIError(refused.message) from None
        return OAuthClient(row)


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
            access_expires_at=now + timedelta(seconds=int(token.get("expires_in") or ACCESS_TTL)),
            refresh_expires_at=now + REFRESH_TTL if refresh else None,
        )
    )
    db.session.flush()


EXTENSION = "assistant_oauth"


def authorization_server() -> AuthorizationServer:
    return current_app.extensions[EXTENSION]


def init_server(app: Flask) -> None:
    """One server per app (Authlib's registries are per instance)."""
    server = AuthorizationServer()
    server.init_app(app, query_client=_query_client, save_token=_save_token)
    app.extensions[EXTENSION] = server
    server.register_token_generator(
        "default",
        BearerTokenGenerator(
            access_token_generator=lambda **_: secrets.new_access_token(),
            refresh_token_generator=lambda **_: secrets.new_refresh_token(),
            expires_generator=lambda client, grant_type: ACCESS_TTL,
        ),
    )
    server.register_grant(CodeGrant, [S256Only(required=True)])
    server.register_grant(RefreshGrant)
    server.register_grant(DeviceGrant)
    server.register_endpoint(DeviceEndpoint)
    server.register_endpoint(Revocation)
    server.register_endpoint(Registration)
