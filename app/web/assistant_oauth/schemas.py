"""The OpenAPI description of the OAuth doors MCP clients use (issue 29): discovery,
revocation and device authorization (not yet /authorize, /token and /register: their form and metadata bodies and
HTML answers are still to be described for the live schemathesis run). Authlib and the metadata views build these
answers themselves (OAuth's own shapes); the models here describe them for the document only."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from app.web.openapi.operations import PUBLIC, Answer, documented

ViewT = TypeVar("ViewT", bound=Callable)
TAG = "assistant-oauth"


class OAuthError(BaseModel):
    """OAuth's error answer (RFC 6749 section 5.2, RFC 7591 section 3.2.2, RFC 8628 section 3.5)."""

    error: str
    error_description: str | None = None


class DeviceAuthorization(BaseModel):
    """A device authorization (RFC 8628 section 3.2): the person types `user_code` at `verification_uri`."""

    model_config = ConfigDict(extra="allow")
    device_code: str
    user_code: str
    verification_uri: str
    verification_uri_complete: str | None = None
    expires_in: int
    interval: int


class AuthorizationServerMetadata(BaseModel):
    """RFC 8414 authorization-server metadata."""

    model_config = ConfigDict(extra="allow")
    issuer: str
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str
    revocation_endpoint: str
    device_authorization_endpoint: str
    scopes_supported: list[str]
    code_challenge_methods_supported: list[str]


class ProtectedResourceMetadata(BaseModel):
    """RFC 9728 protected-resource metadata of the tool gateway."""

    model_config = ConfigDict(extra="allow")
    resource: str
    authorization_servers: list[str]
    bearer_methods_supported: list[str]
    scopes_supported: list[str]


# Every model above: described only (the views answer through Authlib or jsonify, not `respond`).
DESCRIBED_ONLY = (
    OAuthError,
    DeviceAuthorization,
    AuthorizationServerMetadata,
    ProtectedResourceMetadata,
)

BAD_REQUEST = Answer(
    "OAuth error (`invalid_request`, `invalid_grant`, `unsupported_grant_type`, ...; also plain HTTP other than "
    "loopback: `HTTPS is required.`)",
    (OAuthError,),
)
BAD_CLIENT = Answer("`invalid_client`: the client is unknown or its authentication failed", (OAuthError,))
FORM = "The body is `application/x-www-form-urlencoded`, as OAuth specifies."


def oauth_post(summary: str, ok: Answer, description: str) -> Callable[[ViewT], ViewT]:
    responses = {200: ok, 400: BAD_REQUEST, 401: BAD_CLIENT}
    return documented(
        summary, tag=TAG, security=PUBLIC, responses=responses, description=f"{description} {FORM}"
    )


def discovery(summary: str, model: type[BaseModel]) -> Callable[[ViewT], ViewT]:
    return documented(
        summary, tag=TAG, security=PUBLIC, responses={200: Answer("The metadata document", (model,))}
    )
