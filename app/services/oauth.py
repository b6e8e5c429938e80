"""OAuth connections: authorization-server discovery, dynamic client registration, start, callback, token refresh.

An `oauth` method in the catalog connects through Authlib's OAuth 2.0 client. The client comes from the operator
(`SWITCHBOARD_OAUTH_CLIENTS`, JSON `{slug: {client_id, client_secret, authorization_endpoint?, token_endpoint?,
issuer?, scopes?}}`) or, when the method declares `dynamicClientRegistration`, from a registration (RFC 7591) made
once per company and app after discovering the authorization server from the provider's MCP server (RFC 9728
protected-resource metadata, then RFC 8414 or OpenID Connect metadata).

The flow keeps everything on the server: the state row (only its SHA-256 is stored) is single use, expires after ten
minutes and is bound to the user, draft connection, identity and audience; the PKCE verifier is encrypted and never
leaves the server. The callback consumes the state with one conditional UPDATE, so two parallel callbacks with the
same state make exactly one code exchange.

Refresh is single-flight per grant: a row lock (`SELECT ... FOR UPDATE`; a process lock on SQLite) in a unit of work
of its own, so a rotated refresh token is saved even when the caller's transaction later rolls back.

Outbound calls always carry timeouts. Tokens, client secrets and verifiers never reach activity, logs or pages; the
provider's raw `error_description` is never shown.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

import jwt
import requests
from authlib.common.errors import AuthlibBaseError
from authlib.integrations.requests_client import OAuth2Session
from flask import current_app
from sqlalchemy import delete, select, update
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.catalog.loader import get_method
from app.core.errors import (
    Conflict,
    Forbidden,
    ProviderRefused,
    ServiceError,
    Unprocessable,
    ValidationFailed,
)
from app.core.net_guard import UnsafeUrl, check_outbound_url
from app.extensions import db
from app.models import (
    ActivityLog,
    ConnectionGrant,
    GrantSecret,
    Membership,
    OAuthClientRegistration,
    OAuthState,
    ThreadInteraction,
    ToolConnection,
)
from app.models.base import as_utc, utcnow
from app.services import connections as connection_service
from app.services.access.effective import CONFIGURE_FORBIDDEN, can_configure, can_manage_connections
from app.services.activity import record_activity
from app.services.intents import CARD_CLOSED
from app.services.secrets_box import decrypt, encrypt

log = logging.getLogger(__name__)

CALLBACK_PATH = "/oauth/callback"
STATE_TTL = timedelta(minutes=10)
# After the token endpoint failed (network or 5xx), refreshes of that grant wait this long before trying again,
# so callers during an outage fail fast instead of each queueing on the grant's lock for another request.
REFRESH_BACKOFF_SECONDS = 30
REFRESH_SKEW_SECONDS = 60
INVALID_STATE = "Invalid or expired OAuth state"
WRONG_USER = "This sign-in was started by someone else. Start it again from your own session."
NEEDS_REAUTHORIZATION = "needs_reauthorization"
REJECTED_ERRORS = ("invalid_grant", "invalid_client", "unauthorized_client")
REAUTHORIZE_MESSAGE = "The provider no longer accepts this connection's sign-in. Reconnect it to continue."

# Plain words for every way a callback can fail; the provider's own text is never shown.
FAILURE_MESSAGES = {
    "access_denied": "Access was not granted at {provider}, so nothing was connected. You can try again.",
    "provider_error": "{provider} could not complete the sign-in. Try again.",
    "missing_code": "{provider} did not send an authorization code back. Try again.",
    "issuer_mismatch": "The sign-in answer did not come from {provider}'s authorization server. Try again.",
    "exchange_failed": "{provider} did not accept the sign-in when Switchboard finished it. Try again.",
    "unreachable": "Could not reach {provider} to finish the sign-in. Try again in a moment.",
    "tools_failed": "Signed in, but {provider}'s tools could not be listed. Try again.",
}


class OAuthFlowError(ServiceError):
    """A callback that could not finish; `reason` is a key of FAILURE_MESSAGES (safe for activity and pages)."""

    status = 400

    def __init__(self, reason: str, *, provider: str = "The provider", status: int | None = None):
        self.reason = reason if reason in FAILURE_MESSAGES else "provider_error"
        super().__init__(FAILURE_MESSAGES[self.reason].format(provider=provider), status)


class InvalidOAuthState(ServiceError):
    status = 400

    def __init__(self):
        super().__init__(INVALID_STATE)


class ReauthorizationRequired(ServiceError):
    """The stored authorization is no longer usable; a person must reconnect."""

    status = 409

    def __init__(self):
        super().__init__(REAUTHORIZE_MESSAGE)


class TokenRefreshUnavailable(ServiceError):
    """The token endpoint could not be reached or failed (5xx): credentials are kept, try again later."""

    status = 503

    def __init__(self):
        super().__init__("The provider's sign-in service is unavailable right now. Try again shortly.")


# -- configuration and metadata ----------------------------------------------------------------------------------


def _timeout() -> float:
    return float(current_app.config.get("OUTBOUND_TIMEOUT_SECONDS", 10))


def operator_clients() -> dict:
    """Operator-configured OAuth clients: app config `OAUTH_CLIENTS`, else env `SWITCHBOARD_OAUTH_CLIENTS` (JSON)."""
    configured = current_app.config.get("OAUTH_CLIENTS")
    if configured is None:
        raw = os.environ.get("SWITCHBOARD_OAUTH_CLIENTS") or "{}"
        try:
            configured = json.loads(raw)
        except json.JSONDecodeError:
            log.warning("SWITCHBOARD_OAUTH_CLIENTS is not valid JSON; ignoring it")
            configured = {}
    return configured if isinstance(configured, dict) else {}


def redirect_uri() -> str:
    return str(current_app.config["PUBLIC_BASE_URL"]).rstrip("/") + CALLBACK_PATH


@dataclass
class AuthServer:
    """The parts of an authorization server's metadata Switchboard uses (all public)."""

    issuer: str | None
    authorization_endpoint: str
    token_endpoint: str
    registration_endpoint: str | None = None
    userinfo_endpoint: str | None = None
    code_challenge_methods: list | None = None
    scopes_supported: list | None = None
    token_auth_methods: list | None = None

    @classmethod
    def from_metadata(cls, meta: dict) -> AuthServer:
        return cls(
            issuer=meta.get("issuer"),
            authorization_endpoint=meta["authorization_endpoint"],
            token_endpoint=meta["token_endpoint"],
            registration_endpoint=meta.get("registration_endpoint"),
            userinfo_endpoint=meta.get("userinfo_endpoint"),
            code_challenge_methods=meta.get("code_challenge_methods_supported"),
            scopes_supported=meta.get("scopes_supported"),
            token_auth_methods=meta.get("token_endpoint_auth_methods_supported"),
        )

    @property
    def supports_pkce_s256(self) -> bool:
        # Unknown (not advertised) counts as supported: servers ignore parameters they do not know.
        return self.code_challenge_methods is None or "S256" in self.code_challenge_methods


@dataclass
class ClientConfig:
    client_id: str
    client_secret: str | None
    auth_method: str
    server: AuthServer
    source: str  # "operator" or "registration"
    scopes: list = field(default_factory=list)


def _guard(url: str, trusted_host: str | None) -> str:
    """A URL learned from a provider: allowed on the trusted server's own host, else it must pass the guard."""
    host = (urlsplit(url).hostname or "").lower()
    if urlsplit(url).scheme not in ("http", "https") or not host:
        raise ProviderRefused("The provider published an invalid authorization server address.")
    if trusted_host and host == trusted_host.lower():
        return url
    try:
        return check_outbound_url(url)
    except UnsafeUrl as err:
        raise ProviderRefused(f"The provider's authorization server is not allowed: {err}") from None


def _get_json(url: str) -> dict | None:
    try:
        response = requests.get(
            url, timeout=_timeout(), allow_redirects=False, headers={"Accept": "application/json"}
        )
    except requests.RequestException:
        return None
    if response.status_code != 200:
        return None
    try:
        data = response.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def _well_known(base: str, suffix: str) -> list[str]:
    """RFC 8414 / RFC 9728 well-known locations for an identifier with or without a path (path-insert first)."""
    parts = urlsplit(base)
    path = parts.path.rstrip("/")
    urls = []
    if path:
        urls.append(urlunsplit((parts.scheme, parts.netloc, f"/.well-known/{suffix}{path}", "", "")))
    urls.append(urlunsplit((parts.scheme, parts.netloc, f"/.well-known/{suffix}", "", "")))
    return urls


def _resource_metadata_hint(server_url: str) -> str | None:
    """POST an unauthenticated initialize: a 401 may name the metadata in `WWW-Authenticate: resource_metadata`."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-03-26",
            "capabilities": {},
            "clientInfo": {"name": "switchboard", "version": "0.1.0"},
        },
    }
    try:
        response = requests.post(
            server_url,
            json=body,
            timeout=_timeout(),
            allow_redirects=False,
            headers={"Accept": "application/json, text/event-stream"},
        )
    except requests.RequestException:
        return None
    if response.status_code != 401:
        return None
    header = response.headers.get("WWW-Authenticate", "")
    marker = "resource_metadata="
    index = header.find(marker)
    if index < 0:
        return None
    value = header[index + len(marker) :].strip()
    value = value[1:].split('"', 1)[0] if value.startswith('"') else value.split(",", 1)[0].strip()
    return value or None


def fetch_server_metadata(issuer: str, trusted_host: str | None) -> AuthServer:
    """RFC 8414 then OpenID Connect discovery for an issuer; the metadata must name that same issuer."""
    candidates = _well_known(issuer, "oauth-authorization-server") + _well_known(
        issuer, "openid-configuration"
    )
    candidates.append(issuer.rstrip("/") + "/.well-known/openid-configuration")
    for url in dict.fromkeys(candidates):
        meta = _get_json(_guard(url, trusted_host))
        if not meta or not meta.get("authorization_endpoint") or not meta.get("token_endpoint"):
            continue
        if meta.get("issuer") and meta["issuer"].rstrip("/") != issuer.rstrip("/"):
            continue  # RFC 8414 section 3.3: a mismatched issuer must not be used
        for key in ("authorization_endpoint", "token_endpoint", "registration_endpoint", "userinfo_endpoint"):
            if meta.get(key):
                _guard(meta[key], trusted_host or urlsplit(issuer).hostname)
        return AuthServer.from_metadata(meta)
    raise ProviderRefused("Could not read the provider's authorization server metadata.")


def discover_authorization_server(server_url: str) -> AuthServer:
    """From an MCP server URL to its authorization server: RFC 9728 (hint, path-insert, root), else the origin."""
    trusted_host = urlsplit(server_url).hostname
    locations = []
    hint = _resource_metadata_hint(server_url)
    if hint:
        locations.append(_guard(hint, trusted_host))
    locations += _well_known(server_url, "oauth-protected-resource")
    for url in dict.fromkeys(locations):
        meta = _get_json(url)
        servers = (meta or {}).get("authorization_servers") or []
        if servers and isinstance(servers[0], str):
            issuer = _guard(servers[0], trusted_host)
            return fetch_server_metadata(issuer, urlsplit(issuer).hostname)
    parts = urlsplit(server_url)
    # No protected-resource metadata: older MCP servers are their own authorization server.
    return fetch_server_metadata(urlunsplit((parts.scheme, parts.netloc, "", "", "")), trusted_host)


# -- clients ------------------------------------------------------------------------------------------------------


def _auth_method(server: AuthServer, has_secret: bool) -> str:
    if not has_secret:
        return "none"
    supported = server.token_auth_methods or ["client_secret_basic"]
    for method in ("client_secret_basic", "client_secret_post"):
        if method in supported:
            return method
    return "client_secret_basic"


def _operator_client(connection: ToolConnection, app_definition, method) -> ClientConfig | None:
    entry = operator_clients().get(connection.app_slug)
    if not isinstance(entry, dict) or not entry.get("client_id"):
        return None
    if entry.get("authorization_endpoint") and entry.get("token_endpoint"):
        server = AuthServer(
            issuer=entry.get("issuer"),
            authorization_endpoint=entry["authorization_endpoint"],
            token_endpoint=entry["token_endpoint"],
            userinfo_endpoint=entry.get("userinfo_endpoint"),
        )
    elif entry.get("issuer"):
        server = fetch_server_metadata(entry["issuer"], urlsplit(entry["issuer"]).hostname)
    else:
        server = discover_authorization_server(
            connection_service.server_url_for(connection, app_definition, method)
        )
    secret = entry.get("client_secret") or None
    return ClientConfig(
        client_id=str(entry["client_id"]),
        client_secret=secret,
        auth_method=entry.get("token_endpoint_auth_method") or _auth_method(server, bool(secret)),
        server=server,
        source="operator",
        scopes=list(entry.get("scopes") or []),
    )


def _client_from_registration(row: OAuthClientRegistration) -> ClientConfig:
    data = row.registration or {}
    return ClientConfig(
        client_id=row.client_id,
        client_secret=decrypt(row.client_secret_ciphertext) if row.client_secret_ciphertext else None,
        auth_method=data.get("token_endpoint_auth_method") or "client_secret_basic",
        server=AuthServer(**data["server"]),
        source="registration",
    )


def register_client(server: AuthServer, app_definition) -> tuple[dict, str | None]:
    """RFC 7591 registration; returns (public registration metadata, client secret or None)."""
    if not server.registration_endpoint:
        raise ProviderRefused("The provider does not offer dynamic client registration.")
    auth_method = _auth_method(server, True)
    request_body = {
        "client_name": f"Switchboard ({app_definition.name})",
        "redirect_uris": [redirect_uri()],
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "token_endpoint_auth_method": auth_method,
    }
    try:
        response = requests.post(
            server.registration_endpoint, json=request_body, timeout=_timeout(), allow_redirects=False
        )
    except requests.RequestException:
        raise ProviderRefused("Could not reach the provider to register Switchboard as a client.") from None
    if response.status_code not in (200, 201):
        raise ProviderRefused(f"The provider refused to register Switchboard (HTTP {response.status_code}).")
    try:
        issued = response.json()
    except ValueError:
        raise ProviderRefused(
            "The provider answered the client registration with something unreadable."
        ) from None
    if not isinstance(issued, dict) or not issued.get("client_id"):
        raise ProviderRefused("The provider did not issue a client id.")
    public = {
        key: issued[key]
        for key in ("client_id", "redirect_uris", "grant_types", "response_types", "client_id_issued_at")
        if key in issued
    }
    public["token_endpoint_auth_method"] = (
        issued.get("token_endpoint_auth_method") or auth_method if issued.get("client_secret") else "none"
    )
    public["server"] = asdict(server)
    return public, issued.get("client_secret")


def _registered_client(connection: ToolConnection, app_definition, method) -> ClientConfig:
    """The company's registered client for this app, registering one first if there is none (or it is stale)."""
    row = db.session.scalar(
        select(OAuthClientRegistration).where(
            OAuthClientRegistration.company_id == connection.company_id,
            OAuthClientRegistration.app_slug == connection.app_slug,
        )
    )
    if row is not None and redirect_uri() in (row.registration or {}).get("redirect_uris", [redirect_uri()]):
        return _client_from_registration(row)
    server = discover_authorization_server(
        connection_service.server_url_for(connection, app_definition, method)
    )
    public, secret = register_client(server, app_definition)
    values = {
        "issuer": server.issuer or server.authorization_endpoint,
        "client_id": public["client_id"],
        "client_secret_ciphertext": encrypt(secret) if secret else None,
        "registration": public,
    }
    if row is not None:  # the public URL changed since the last registration: replace it
        for key, value in values.items():
            setattr(row, key, value)
        db.session.flush()
        return _client_from_registration(row)
    try:
        with db.session.begin_nested():
            row = OAuthClientRegistration(
                company_id=connection.company_id, app_slug=connection.app_slug, **values
            )
            db.session.add(row)
    except IntegrityError:
        # A parallel start registered first: use that one (ours stays unused at the provider).
        row = db.session.scalar(
            select(OAuthClientRegistration).where(
                OAuthClientRegistration.company_id == connection.company_id,
                OAuthClientRegistration.app_slug == connection.app_slug,
            )
        )
    return _client_from_registration(row)


def resolve_client(connection: ToolConnection, app_definition, method) -> ClientConfig:
    """Operator credentials first; else the dynamic registration the method declares; else a clear refusal."""
    client = _operator_client(connection, app_definition, method)
    if client is not None:
        return client
    if method.defaults is not None and method.defaults.dynamicClientRegistration:
        return _registered_client(connection, app_definition, method)
    raise Unprocessable(
        f"{app_definition.name} sign-in needs OAuth client credentials from the operator "
        "(SWITCHBOARD_OAUTH_CLIENTS)."
    )


def _client_for_grant(session: Session, grant: ConnectionGrant, connection: ToolConnection) -> ClientConfig:
    tenant = grant.provider_tenant or {}
    if tenant.get("clientSource") == "registration":
        row = session.scalar(
            select(OAuthClientRegistration).where(
                OAuthClientRegistration.company_id == connection.company_id,
                OAuthClientRegistration.app_slug == connection.app_slug,
            )
        )
        if row is None or row.client_id != tenant.get("clientId"):
            raise ReauthorizationRequired()
        return _client_from_registration(row)
    entry = operator_clients().get(connection.app_slug) or {}
    if entry.get("client_id") != tenant.get("clientId"):
        raise ReauthorizationRequired()
    return ClientConfig(
        client_id=entry["client_id"],
        client_secret=entry.get("client_secret") or None,
        auth_method=tenant.get("authMethod") or "client_secret_basic",
        server=AuthServer(
            issuer=tenant.get("issuer"),
            authorization_endpoint=entry.get("authorization_endpoint") or "",
            token_endpoint=tenant["tokenEndpoint"],
        ),
        source="operator",
    )


def _oauth_session(client: ClientConfig, **kwargs) -> OAuth2Session:
    return OAuth2Session(
        client_id=client.client_id,
        client_secret=client.client_secret,
        token_endpoint_auth_method=client.auth_method,
        **kwargs,
    )


# -- start --------------------------------------------------------------------------------------------------------


def _hash_state(raw_state: str) -> str:
    return hashlib.sha256(raw_state.encode("utf-8")).hexdigest()


def normalize_origin(value: str | None) -> str | None:
    """An http(s) origin without credentials or path, else None (the page then posts to its own origin)."""
    if not value:
        return None
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        return None
    return f"{parts.scheme}://{parts.netloc.lower()}"


def resource_indicator(server_url: str) -> str:
    """The MCP server's canonical URI, sent as the RFC 8707 `resource` of every authorization and token request so
    the token is bound to that server (MCP authorization): lowercase scheme and host, no query or fragment, and
    no trailing slash."""
    parts = urlsplit(server_url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), "", ""))


def _requested_scopes(client: ClientConfig, method) -> list[str]:
    scopes = list(client.scopes or (method.defaults.scopes if method.defaults else []) or [])
    supported = client.server.scopes_supported or []
    if client.server.userinfo_endpoint and "openid" in supported:
        # An OpenID provider tells the account's email through userinfo: the connection's account label.
        for scope in ("openid", "email"):
            if scope in supported and scope not in scopes:
                scopes.append(scope)
    if "offline_access" in supported and "offline_access" not in scopes:
        scopes.append("offline_access")
    return scopes


def _require_configure(actor: Membership, connection: ToolConnection, identity: str) -> None:
    if not can_configure(actor, connection):
        raise Forbidden(CONFIGURE_FORBIDDEN)
    if identity == "organization" and not can_manage_connections(actor):
        raise Forbidden(connection_service.ORGANIZATION_FORBIDDEN)


def start_authorization(
    actor: Membership,
    connection: ToolConnection,
    app_definition,
    *,
    interaction_id: uuid.UUID | None = None,
    opener_origin: str | None = None,
) -> str:
    """Create the state row and return the provider's authorization URL (new connection or reconnect)."""
    method = get_method(app_definition, connection.method_key)
    if method is None or method.auth != "oauth" or connection.status == "archived":
        raise Unprocessable("This connection does not sign in with OAuth.")
    identity = connection.config.get("identity", "organization")
    _require_configure(actor, connection, identity)
    if interaction_id is not None:
        interaction = db.session.get(ThreadInteraction, interaction_id)
        if interaction is None or interaction.company_id != connection.company_id:
            raise ValidationFailed(
                [{"loc": ["interactionId"], "msg": "Unknown interaction", "type": "value_error"}]
            )
        if interaction.status != "pending":
            raise Conflict(CARD_CLOSED)
    client = resolve_client(connection, app_definition, method)
    now = utcnow()
    db.session.execute(delete(OAuthState).where(OAuthState.expires_at < now))
    raw_state = secrets.token_urlsafe(32)  # 256 bits
    if interaction_id is not None:
        # The card's id travels in clear beside the secret part, so a callback that arrives after the card
        # closed (its state deleted) can still say so instead of "invalid state".
        raw_state = f"{interaction_id.hex}{CARD_STATE_SEPARATOR}{raw_state}"
    verifier = secrets.token_urlsafe(64) if client.server.supports_pkce_s256 else None
    scopes = _requested_scopes(client, method)
    resource = resource_indicator(connection_service.server_url_for(connection, app_definition, method))
    draft_audience = connection.config.get("draftAudience") if connection.status == "draft" else None
    db.session.add(
        OAuthState(
            state_hash=_hash_state(raw_state),
            company_id=connection.company_id,
            connection_id=connection.id,
            user_id=actor.user_id,
            identity=identity,
            audience=draft_audience,
            code_verifier=encrypt(verifier) if verifier else None,
            redirect_uri=redirect_uri(),
            issuer=client.server.issuer,
            provider={
                "clientId": client.client_id,
                "clientSource": client.source,
                "authMethod": client.auth_method,
                "tokenEndpoint": client.server.token_endpoint,
                "userinfoEndpoint": client.server.userinfo_endpoint,
                "scopes": scopes,
                "resource": resource,
            },
            interaction_id=interaction_id,
            opener_origin=normalize_origin(opener_origin) if interaction_id else None,
            expires_at=now + STATE_TTL,
        )
    )
    db.session.flush()
    extra = {"prompt": "consent"} if "offline_access" in scopes else {}
    session = _oauth_session(
        client,
        redirect_uri=redirect_uri(),
        scope=" ".join(scopes) or None,
        code_challenge_method="S256" if verifier else None,
    )
    url, _ = session.create_authorization_url(
        client.server.authorization_endpoint,
        state=raw_state,
        code_verifier=verifier,
        resource=resource,
        **extra,
    )
    record_activity(
        company_id=connection.company_id,
        actor_type="user",
        actor_id=actor.user_id,
        action="tool_app.oauth_started",
        entity_type="tool_connection",
        entity_id=connection.id,
        details={"app": connection.app_slug, "clientSource": client.source, "pkce": bool(verifier)},
    )
    return url


# -- callback -----------------------------------------------------------------------------------------------------


CARD_STATE_SEPARATOR = "."


def card_of_state(raw_state: str | None) -> uuid.UUID | None:
    """The card id a card's sign-in state names (never trusted for anything but choosing an error page)."""
    if not raw_state or len(raw_state) > 200 or CARD_STATE_SEPARATOR not in raw_state:
        return None
    try:
        return uuid.UUID(hex=raw_state.split(CARD_STATE_SEPARATOR, 1)[0])
    except ValueError:
        return None


def peek_state(raw_state: str | None) -> OAuthState | None:
    """The live (unconsumed, unexpired) state row for a callback's state value, without consuming it."""
    if not raw_state or len(raw_state) > 200:
        return None
    row = db.session.get(OAuthState, _hash_state(raw_state))
    if row is None or row.consumed_at is not None or as_utc(row.expires_at) <= utcnow():
        return None
    return row


def consume_state(raw_state: str, user_id: uuid.UUID) -> OAuthState:
    """Consume a state atomically for its own user: one conditional UPDATE, so a replay or a parallel callback
    finds nothing to consume. The caller commits before exchanging the code."""
    row = peek_state(raw_state)
    if row is None:
        raise InvalidOAuthState()
    if row.user_id != user_id:
        raise Forbidden(WRONG_USER)
    now = utcnow()
    result = db.session.execute(
        update(OAuthState)
        .where(
            OAuthState.state_hash == row.state_hash,
            OAuthState.user_id == user_id,
            OAuthState.consumed_at.is_(None),
            OAuthState.expires_at > now,
        )
        .values(consumed_at=now)
        .execution_options(synchronize_session=False)
    )
    if result.rowcount != 1:
        raise InvalidOAuthState()
    db.session.expire(row)
    return row


def _expires_at(token: dict) -> int | None:
    """Seconds since the epoch when the access token expires: from `expires_at`, else `expires_in`, else unknown."""
    for key in ("expires_at",):
        value = token.get(key)
        if isinstance(value, int | float) and value > 0:
            return int(value)
    value = token.get("expires_in")
    if isinstance(value, int | float | str) and str(value).strip().isdigit():
        return int(time.time()) + int(str(value).strip())
    return None


LABEL_CLAIMS = ("email", "preferred_username", "login", "name", "workspace_name")


def _id_token_label(id_token: str | None, issuer: str | None, client_id: str) -> str | None:
    """The account label from the ID token of the code exchange, when it is for us from this issuer and current.

    The token came straight from the token endpoint over the connection we opened, which OpenID Connect Core
    (3.1.3.7, item 6) accepts in place of checking its signature. Only a display label is taken from it. Needed
    because a token bound to the MCP server (RFC 8707) is refused at userinfo.
    """
    if not isinstance(id_token, str) or not issuer:
        return None
    try:
        claims = jwt.decode(
            id_token,
            # PyJWT skips every claim check once the signature check is off, unless each is asked for.
            options={
                "verify_signature": False,
                "verify_aud": True,
                "verify_iss": True,
                "verify_exp": True,
                "require": ["iss", "aud", "exp"],
            },
            audience=client_id,
            issuer=list(dict.fromkeys([issuer, issuer.rstrip("/")])),
        )
    except jwt.PyJWTError:
        return None
    return _label_from(claims)


def _label_from(info: dict) -> str | None:
    for key in LABEL_CLAIMS:
        value = info.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()[:300]
    return None


def _account_label(userinfo_endpoint: str | None, access_token: str) -> str | None:
    if not userinfo_endpoint:
        return None
    try:
        response = requests.get(
            userinfo_endpoint,
            headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"},
            timeout=_timeout(),
            allow_redirects=False,
        )
        info = response.json() if response.status_code == 200 else {}
    except (requests.RequestException, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    return _label_from(info)


def _exchange_code(state: OAuthState, client: ClientConfig, code: str, provider_name: str) -> dict:
    verifier = decrypt(state.code_verifier) if state.code_verifier else None
    session = _oauth_session(client, redirect_uri=state.redirect_uri)
    params = {"code": code, "grant_type": "authorization_code", "timeout": _timeout()}
    if verifier:
        params["code_verifier"] = verifier
    if (state.provider or {}).get("resource"):
        params["resource"] = state.provider["resource"]
    try:
        token = session.fetch_token(client.server.token_endpoint, **params)
    except requests.RequestException:
        raise OAuthFlowError("unreachable", provider=provider_name, status=502) from None
    except (AuthlibBaseError, ValueError):
        raise OAuthFlowError("exchange_failed", provider=provider_name, status=502) from None
    if not isinstance(token, dict) or not token.get("access_token"):
        raise OAuthFlowError("exchange_failed", provider=provider_name, status=502)
    return dict(token)


@dataclass
class SignedIn:
    """What a provider sign-in returned, before anything is stored: the tokens, the tools they list, the account."""

    client: ClientConfig
    token: dict
    secrets: dict[str, str]
    tools: list
    label: str | None


def exchange_authorization(
    actor: Membership,
    state: OAuthState,
    connection: ToolConnection,
    app_definition,
    *,
    code: str | None,
    error: str | None,
    iss: str | None,
) -> SignedIn:
    """The outbound half of a callback: exchange the code and list the tools with the new token. Writes nothing.

    Raises OAuthFlowError with a plain reason.
    """
    provider_name = app_definition.name
    _require_configure(actor, connection, state.identity)
    if error:
        raise OAuthFlowError(
            "access_denied" if error == "access_denied" else "provider_error", provider=provider_name
        )
    if not code:
        raise OAuthFlowError("missing_code", provider=provider_name)
    if iss is not None and (state.issuer is None or iss.rstrip("/") != state.issuer.rstrip("/")):
        raise OAuthFlowError("issuer_mismatch", provider=provider_name)
    method = get_method(app_definition, connection.method_key)
    provider = state.provider or {}
    client = ClientConfig(
        client_id=provider["clientId"],
        client_secret=None,
        auth_method=provider.get("authMethod") or "client_secret_basic",
        server=AuthServer(
            issuer=state.issuer, authorization_endpoint="", token_endpoint=provider["tokenEndpoint"]
        ),
        source=provider.get("clientSource", "operator"),
    )
    client.client_secret = _current_client_secret(connection, client)
    token = _exchange_code(state, client, code, provider_name)
    access_token = token["access_token"]
    secrets_to_store = {connection_service.OAUTH_ACCESS_TOKEN_KEY: access_token}
    if token.get("refresh_token"):
        secrets_to_store[connection_service.OAUTH_REFRESH_TOKEN_KEY] = token["refresh_token"]
    try:
        tools = connection_service.verify_and_list_tools(connection, app_definition, method, secrets_to_store)
    except ProviderRefused:
        raise OAuthFlowError("tools_failed", provider=provider_name, status=502) from None
    label = _id_token_label(token.get("id_token"), state.issuer, client.client_id) or _account_label(
        provider.get("userinfoEndpoint"), access_token
    )
    return SignedIn(client=client, token=token, secrets=secrets_to_store, tools=tools, label=label)


def store_authorization(
    actor: Membership, state: OAuthState, connection: ToolConnection, signed_in: SignedIn
) -> ToolConnection:
    """The database half: store the tokens encrypted, index the tools, activate (or reconnect). Callers that
    finish a card run it inside the card's locked transaction, so a closed card never gets tokens."""
    _require_configure(actor, connection, state.identity)
    provider = state.provider or {}
    client, token = signed_in.client, signed_in.token
    before_instructions = connection.agent_instructions
    if connection.status == "draft" and state.audience is not None:
        connection.config = {**connection.config, "draftAudience": state.audience}
    grant = connection_service.grant_for_identity(connection, state.identity, actor)
    granted = token.get("scope")
    grant.scopes = granted.split() if isinstance(granted, str) else list(provider.get("scopes") or [])
    grant.provider_tenant = {
        **(grant.provider_tenant or {}),
        "issuer": state.issuer,
        "clientId": client.client_id,
        "clientSource": client.source,
        "authMethod": client.auth_method,
        "tokenEndpoint": client.server.token_endpoint,
        "expiresAt": _expires_at(token),
        "accountLabel": signed_in.label,
        "resource": provider.get("resource"),
    }
    grant.revoked_at = None
    if signed_in.label:
        connection.provider_account_label = signed_in.label
    first_activation = connection_service.activate_connection(
        actor, connection, grant, signed_in.secrets, signed_in.tools
    )
    connection_service.record_setup_finished(
        actor, connection, grant, signed_in.tools, before_instructions, first_activation
    )
    record_activity(
        company_id=connection.company_id,
        actor_type="user",
        actor_id=actor.user_id,
        action="tool_app.oauth_connected",
        entity_type="tool_connection",
        entity_id=connection.id,
        details={
            "app": connection.app_slug,
            "grantId": str(grant.id),
            "scopes": grant.scopes,
            "reconnect": not first_activation,
            "interactionId": str(state.interaction_id) if state.interaction_id else None,
        },
    )
    return connection


def _current_client_secret(connection: ToolConnection, client: ClientConfig) -> str | None:
    if client.source == "registration":
        row = db.session.scalar(
            select(OAuthClientRegistration).where(
                OAuthClientRegistration.company_id == connection.company_id,
                OAuthClientRegistration.app_slug == connection.app_slug,
            )
        )
        if row is None or row.client_id != client.client_id or not row.client_secret_ciphertext:
            return None
        return decrypt(row.client_secret_ciphertext)
    entry = operator_clients().get(connection.app_slug) or {}
    return entry.get("client_secret") if entry.get("client_id") == client.client_id else None


def record_failure(actor_user_id: uuid.UUID, state: OAuthState, reason: str) -> None:
    """Activity for a callback that did not connect (the reason is a fixed code, never provider text)."""
    record_activity(
        company_id=state.company_id,
        actor_type="user",
        actor_id=actor_user_id,
        action="tool_app.oauth_failed",
        entity_type="tool_connection",
        entity_id=state.connection_id,
        details={
            "reason": reason,
            "interactionId": str(state.interaction_id) if state.interaction_id else None,
        },
    )


# -- refresh ------------------------------------------------------------------------------------------------------

_process_locks: dict[uuid.UUID, threading.Lock] = {}
_process_locks_guard = threading.Lock()


@contextmanager
def _grant_process_lock(grant_id: uuid.UUID):
    """SQLite has no row locks: serialize refreshes of one grant within this process instead."""
    if db.engine.dialect.name == "postgresql":
        yield
        return
    with _process_locks_guard:
        lock = _process_locks.setdefault(grant_id, threading.Lock())
    with lock:
        yield


def _is_due(tenant: dict | None) -> bool:
    expires_at = (tenant or {}).get("expiresAt")
    if expires_at is None:
        return False
    return time.time() >= float(expires_at) - REFRESH_SKEW_SECONDS


def get_valid_access_token(connection: ToolConnection, grant: ConnectionGrant) -> str:
    """The grant's access token, refreshed first when expiry minus the skew has passed.

    Raises ReauthorizationRequired (the connection now shows it) or TokenRefreshUnavailable (nothing changed).
    """
    if grant.status == NEEDS_REAUTHORIZATION:
        raise ReauthorizationRequired()
    secrets_now = connection_service.stored_secrets(grant)
    access_token = secrets_now.get(connection_service.OAUTH_ACCESS_TOKEN_KEY)
    if access_token and not _is_due(grant.provider_tenant):
        return access_token
    token = _refresh_single_flight(grant.id)
    if grant not in db.session.dirty:
        db.session.expire(grant)
    return token


def _refresh_single_flight(grant_id: uuid.UUID) -> str:
    """Refresh in a unit of work of its own, holding the grant's row lock (process lock on SQLite)."""
    with _grant_process_lock(grant_id), Session(bind=db.engine, expire_on_commit=False) as session:
        grant = session.scalars(
            select(ConnectionGrant).where(ConnectionGrant.id == grant_id).with_for_update()
        ).one()
        connection = session.get(ToolConnection, grant.connection_id)
        stored = {
            row.key: row
            for row in session.scalars(select(GrantSecret).where(GrantSecret.grant_id == grant_id))
        }
        if grant.status == NEEDS_REAUTHORIZATION:
            session.rollback()
            raise ReauthorizationRequired()
        access_row = stored.get(connection_service.OAUTH_ACCESS_TOKEN_KEY)
        if access_row is not None and not _is_due(grant.provider_tenant):
            token = decrypt(access_row.ciphertext)  # refreshed meanwhile by whoever held the lock
            session.rollback()
            return token
        refresh_row = stored.get(connection_service.OAUTH_REFRESH_TOKEN_KEY)
        if refresh_row is None:
            _mark_needs_reauthorization(session, grant, connection, "no_refresh_token")
            raise ReauthorizationRequired()
        if time.time() < float((grant.provider_tenant or {}).get("refreshRetryAt") or 0):
            session.rollback()  # backing off after a recent failure: no request
            raise TokenRefreshUnavailable()
        try:
            client = _client_for_grant(session, grant, connection)
        except ReauthorizationRequired:
            _mark_needs_reauthorization(session, grant, connection, "client_missing")
            raise
        outcome, token = _post_refresh(
            client, decrypt(refresh_row.ciphertext), (grant.provider_tenant or {}).get("resource")
        )
        if outcome == "rejected":
            _mark_needs_reauthorization(session, grant, connection, "refresh_rejected")
            raise ReauthorizationRequired()
        if outcome == "unavailable":
            # Credentials stay as they are; only the time of the next attempt is kept.
            grant.provider_tenant = {
                **(grant.provider_tenant or {}),
                "refreshRetryAt": int(time.time()) + REFRESH_BACKOFF_SECONDS,
            }
            session.commit()
            raise TokenRefreshUnavailable()
        _save_secret(session, grant, stored, connection_service.OAUTH_ACCESS_TOKEN_KEY, token["access_token"])
        if token.get("refresh_token"):
            _save_secret(
                session, grant, stored, connection_service.OAUTH_REFRESH_TOKEN_KEY, token["refresh_token"]
            )
        tenant = {
            **{k: v for k, v in (grant.provider_tenant or {}).items() if k != "refreshRetryAt"},
            "expiresAt": _expires_at(token),
            "refreshedAt": int(time.time()),
        }
        grant.provider_tenant = tenant
        if isinstance(token.get("scope"), str):
            grant.scopes = token["scope"].split()
        grant.status = "active"
        if connection.health_status == NEEDS_REAUTHORIZATION:
            connection.health_status = "healthy"
            connection.health_message = None
            session.add(_activity(connection, grant, "tool_connection.reauthorization_recovered", {}))
        session.commit()
        return token["access_token"]


def _save_secret(session: Session, grant: ConnectionGrant, stored: dict, key: str, value: str) -> None:
    row = stored.get(key)
    if row is None:
        session.add(
            GrantSecret(company_id=grant.company_id, grant_id=grant.id, key=key, ciphertext=encrypt(value))
        )
    else:
        row.ciphertext = encrypt(value)


def _post_refresh(client: ClientConfig, refresh_token: str, resource: str | None = None) -> tuple[str, dict]:
    """("ok", token) | ("rejected", {}) for invalid_grant or 400/401 | ("unavailable", {}) for network and 5xx."""
    statuses: list[int] = []
    session = _oauth_session(client)
    session.hooks["response"].append(lambda response, *args, **kwargs: statuses.append(response.status_code))
    extra = {"resource": resource} if resource else {}
    try:
        token = session.refresh_token(
            client.server.token_endpoint, refresh_token=refresh_token, timeout=_timeout(), **extra
        )
    except requests.HTTPError:
        status = statuses[-1] if statuses else 0
        return ("rejected", {}) if status in (400, 401) else ("unavailable", {})
    except requests.RequestException:
        return "unavailable", {}
    except AuthlibBaseError as err:
        status = statuses[-1] if statuses else 0
        if getattr(err, "error", None) in REJECTED_ERRORS or status in (400, 401):
            return "rejected", {}
        return "unavailable", {}
    except ValueError:
        status = statuses[-1] if statuses else 0
        return ("rejected", {}) if status in (400, 401) else ("unavailable", {})
    token = dict(token)
    if not token.get("access_token"):
        return "unavailable", {}
    if token.get("refresh_token") == refresh_token:
        # None came back (Authlib copies the old one in): the stored one stays.
        token.pop("refresh_token", None)
    return "ok", token


def _mark_needs_reauthorization(
    session: Session, grant: ConnectionGrant, connection: ToolConnection, reason: str
) -> None:
    grant.status = NEEDS_REAUTHORIZATION
    connection.health_status = NEEDS_REAUTHORIZATION
    connection.health_message = REAUTHORIZE_MESSAGE
    session.add(_activity(connection, grant, "tool_connection.needs_reauthorization", {"reason": reason}))
    session.commit()


def _activity(connection: ToolConnection, grant: ConnectionGrant, action: str, details: dict) -> ActivityLog:
    return ActivityLog(
        company_id=connection.company_id,
        actor_type="system",
        actor_id="oauth",
        action=action,
        entity_type="tool_connection",
        entity_id=str(connection.id),
        details={"grantId": str(grant.id), **details},
    )
