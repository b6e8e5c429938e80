"""The OpenAPI description of the OAuth doors MCP clients use (issue 29): discovery, authorization, token,
registration, revocation and device authorization. Authlib and the metadata views build these answers themselves
(OAuth's own shapes); the models here describe them for the document only."""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from pydantic import BaseModel, ConfigDict

from app.web.openapi.operations import PUBLIC, RETRY_AFTER, Answer, documented

ViewT = TypeVar("ViewT", bound=Callable)
TAG = "assistant-oauth"


class OAuthError(BaseModel):
    """OAuth's error answer (RFC 6749 section 5.2, RFC 7591 section 3.2.2, RFC 8628 section 3.5)."""

    error: str
    error_description: str | None = None


class TokenAnswer(BaseModel):
    """An access token for the gateway, with a rotating refresh token (RFC 6749 section 5.1)."""

    model_config = ConfigDict(extra="allow")
    access_token: str
    token_type: str
    expires_in: int
    refresh_token: str | None = None
    scope: str | None = None


class ClientRegistration(BaseModel):
    """The registered client (RFC 7591 section 3.2.1): its `client_id` and the metadata as accepted."""

    model_config = ConfigDict(extra="allow")
    client_id: str
    client_name: str | None = None
    redirect_uris: list[str] = []
    grant_types: list[str] = []
    token_endpoint_auth_method: str | None = None
    client_secret: str | None = None


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
    TokenAnswer,
    ClientRegistration,
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


REGISTER = documented(
    "Register an OAuth client (open dynamic client registration, RFC 7591)",
    tag=TAG,
    security=PUBLIC,
    description="A JSON body of client metadata (`client_name`, `redirect_uris`, `grant_types`, "
    "`token_endpoint_auth_method`). Throttled per client address (`SWITCHBOARD_OAUTH_REGISTRATIONS_PER_ADDRESS` "
    "per `SWITCHBOARD_OAUTH_REGISTRATION_WINDOW_SECONDS`).",
    responses={
        201: Answer("The registered client", (ClientRegistration,)),
        400: Answer("`invalid_redirect_uri` or `invalid_client_metadata` (or plain HTTP)", (OAuthError,)),
        429: Answer("Too many registrations from this address", (OAuthError,), RETRY_AFTER),
        503: Answer("The registration counter cannot be reached", (OAuthError,), RETRY_AFTER),
    },
)
AUTHORIZE = documented(
    "Authorize an assistant (the consent page)",
    tag=TAG,
    security=({"session": []},),
    description="GET shows the consent page to the signed-in person (sign-in first otherwise); POST (the page's "
    "form, with its CSRF token) answers by redirecting to the client's registered `redirect_uri` with `code` and "
    "`state`, or `error=access_denied`. PKCE S256 and `resource` are required.",
    responses={
        200: Answer("The consent page (HTML)"),
        302: Answer("To sign-in, or back to the client's redirect URI with a code or an OAuth error"),
        400: Answer("An unknown client or a redirect URI it did not register: never redirected to (HTML)"),
    },
)
