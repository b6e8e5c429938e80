"""The OpenAPI description of the OAuth doors MCP clients use: discovery, the token endpoint, revocation and device
authorization, with their form bodies. Authlib parses those bodies and builds the answers (OAuth's own shapes: an
unknown parameter is ignored, so the bodies allow more); the models here describe them for the document only.

Not described: `/authorize` (a page a person's browser opens, answered with HTML and redirects) and `/register`
(RFC 7591 metadata whose redirect URIs are checked by rules a schema cannot state, such as loopback-only plain HTTP).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, RootModel
from pydantic.json_schema import SkipJsonSchema

from app.web.openapi.operations import PUBLIC, Answer, documented

ViewT = TypeVar("ViewT", bound=Callable)
TAG = "assistant-oauth"


class OAuthError(BaseModel):
    """OAuth's error answer (RFC 6749 section 5.2, RFC 7591 section 3.2.2, RFC 8628 section 3.5)."""

    error: str
    error_description: str | None = None


# Optional form parameters: absent, or a string (a form has no null).
Optional = str | SkipJsonSchema[None]
# OAuth parameter values: printable text (RFC 6749 appendix A's VSCHAR, less the space for single values).
TEXT = Field(min_length=1, pattern=r"^[\x21-\x7e]+$")


class FormBody(BaseModel):
    # OAuth: a parameter the server does not know is ignored (RFC 6749 section 3.1); a form's values are strings.
    model_config = ConfigDict(extra="allow", json_schema_extra={"additionalProperties": {"type": "string"}})


class CodeExchange(FormBody):
    """Exchange an authorization code (PKCE S256: `code_verifier` is required)."""

    grant_type: Literal["authorization_code"]
    code: str = TEXT
    redirect_uri: str = TEXT
    code_verifier: str = Field(min_length=43, max_length=128, pattern=r"^[A-Za-z0-9._~-]+$")
    client_id: Optional = None
    resource: Optional = None


class RefreshExchange(FormBody):
    """Exchange a refresh token (it rotates: the answer carries a new one)."""

    grant_type: Literal["refresh_token"]
    refresh_token: str = TEXT
    client_id: Optional = None
    resource: Optional = None
    scope: Optional = None


class DevicePoll(FormBody):
    """Poll for the tokens of a device authorization (RFC 8628 section 3.4)."""

    grant_type: Literal["urn:ietf:params:oauth:grant-type:device_code"]
    device_code: str = TEXT
    client_id: Optional = None


class TokenRequest(RootModel[CodeExchange | RefreshExchange | DevicePoll]):
    """A token request: one of the three grants."""


class RevocationRequest(FormBody):
    """RFC 7009 section 2.1."""

    token: str = TEXT
    token_type_hint: Literal["access_token", "refresh_token"] | SkipJsonSchema[None] = None
    client_id: Optional = None


class DeviceAuthorizationRequest(FormBody):
    """RFC 8628 section 3.1, with the RFC 8707 `resource` (the gateway's URL)."""

    client_id: str = TEXT
    scope: Optional = None
    resource: Optional = None


class TokenAnswer(BaseModel):
    """RFC 6749 section 5.1: a bearer access token and its rotating refresh token."""

    model_config = ConfigDict(extra="allow")
    access_token: str
    token_type: str
    expires_in: int
    refresh_token: str | None = None
    scope: str | None = None


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


def oauth_post(
    summary: str, ok: Answer, description: str, body: type[BaseModel] | None = None
) -> Callable[[ViewT], ViewT]:
    responses = {200: ok, 400: BAD_REQUEST, 401: BAD_CLIENT}
    return documented(
        summary,
        tag=TAG,
        security=PUBLIC,
        responses=responses,
        description=f"{description} {FORM}",
        body=body,
        form=True,
    )


def discovery(summary: str, model: type[BaseModel]) -> Callable[[ViewT], ViewT]:
    return documented(
        summary, tag=TAG, security=PUBLIC, responses={200: Answer("The metadata document", (model,))}
    )
