"""What Authlib's server sees of the assistants' rows (client, code, token, device credential), and the checks the
grants and endpoints share: the RFC 8707 resource, token families, and refusals kept although they answer an error
(`must_keep`, committed by the token door)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta

from authlib.oauth2.rfc6749 import ClientMixin
from authlib.oauth2.rfc6749.errors import OAuth2Error
from flask import current_app, g
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
from app.services.assistants import secrets, urls

CODE_TTL = timedelta(minutes=5)
DEVICE_INTERVAL = 5


def access_ttl() -> int:
    """Seconds an access token lives (`SWITCHBOARD_ASSISTANT_ACCESS_TOKEN_SECONDS`): short, since the refresh token
    carries the session and Disconnect can only stop an access token by its lookup."""
    return int(current_app.config["ASSISTANT_ACCESS_TOKEN_SECONDS"])


def refresh_ttl() -> timedelta:
    """How long a refresh token (and so a sign-in left unused) lives (`SWITCHBOARD_ASSISTANT_REFRESH_TOKEN_SECONDS`)."""
    return timedelta(seconds=int(current_app.config["ASSISTANT_REFRESH_TOKEN_SECONDS"]))


def device_ttl() -> int:
    """Seconds a device code waits for the person (`SWITCHBOARD_ASSISTANT_DEVICE_CODE_SECONDS`)."""
    return int(current_app.config["ASSISTANT_DEVICE_CODE_SECONDS"])


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
        return access_ttl()

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


def live_grant(grant_id: uuid.UUID | None) -> AssistantGrant | None:
    """The grant, unless it was disconnected."""
    grant = db.session.get(AssistantGrant, grant_id) if grant_id else None
    return grant if grant is not None and grant.disconnected_at is None else None
