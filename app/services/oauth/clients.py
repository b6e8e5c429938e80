"""The OAuth client of a connection: the operator's (`SWITCHBOARD_OAUTH_CLIENTS`) or a dynamic registration (RFC 7591)
made once per company and app."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, field
from typing import Any

from authlib.integrations.requests_client import OAuth2Session
from flask import current_app
from requests import RequestException
from sqlalchemy import select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from app.catalog.schema import AppDefinition, Method
from app.core.errors import (
    Conflict,
    ProviderRefused,
)
from app.core.net_guard import guard_session, guarded_session
from app.extensions import db
from app.models import (
    ConnectionGrant,
    OAuthClientRegistration,
    ToolConnection,
)
from app.services.connections import endpoint
from app.services.oauth.discovery import (
    AuthServer,
    _timeout,
    discover_authorization_server,
    fetch_server_metadata,
    operator_hosts,
)
from app.services.oauth.errors import ReauthorizationRequired, SignInNotConfigured
from app.services.secrets_box import decrypt, encrypt

log = logging.getLogger(__name__)


CALLBACK_PATH = "/oauth/callback"


def operator_clients() -> dict:
    """Operator-configured OAuth clients (`SWITCHBOARD_OAUTH_CLIENTS`, read by `app.config` like every setting)."""
    configured = current_app.config.get("OAUTH_CLIENTS") or {}
    return configured if isinstance(configured, dict) else {}


def redirect_uri() -> str:
    return str(current_app.config["PUBLIC_BASE_URL"]).rstrip("/") + CALLBACK_PATH


@dataclass
class ClientConfig:
    client_id: str
    client_secret: str | None
    auth_method: str
    server: AuthServer
    source: str  # "operator" or "registration"
    scopes: list = field(default_factory=list)
    # Hosts its calls may reach as named (`operator_hosts`); None: the operator's allow-list only.
    allowed_hosts: frozenset[str] | None = None


# -- clients ------------------------------------------------------------------------------------------------------


def _auth_method(server: AuthServer, has_secret: bool) -> str:
    if not has_secret:
        return "none"
    supported = server.token_auth_methods or ["client_secret_basic"]
    for method in ("client_secret_basic", "client_secret_post"):
        if method in supported:
            return method
    return "client_secret_basic"


def _operator_client(
    connection: ToolConnection, app_definition: AppDefinition, method: Method
) -> ClientConfig | None:
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
        server = fetch_server_metadata(entry["issuer"], operator_hosts(connection.app_slug))
    else:
        server = discover_authorization_server(
            endpoint.server_url_for(connection, app_definition, method),
            method.transport,
            operator_hosts(connection.app_slug),
        )
    secret = entry.get("client_secret") or None
    return ClientConfig(
        client_id=str(entry["client_id"]),
        client_secret=secret,
        auth_method=entry.get("token_endpoint_auth_method") or _auth_method(server, bool(secret)),
        server=server,
        source="operator",
        scopes=list(entry.get("scopes") or []),
        allowed_hosts=operator_hosts(connection.app_slug),
    )


def _client_from_registration(row: OAuthClientRegistration) -> ClientConfig:
    data = row.registration or {}
    return ClientConfig(
        client_id=row.client_id,
        client_secret=decrypt(row.client_secret_ciphertext) if row.client_secret_ciphertext else None,
        auth_method=data.get("token_endpoint_auth_method") or "client_secret_basic",
        server=AuthServer(**data["server"]),
        source="registration",
        allowed_hosts=operator_hosts(row.app_slug),
    )


def register_client(server: AuthServer, app_definition: AppDefinition) -> tuple[dict, str | None]:
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
        response = guarded_session(operator_hosts(app_definition.slug)).post(
            server.registration_endpoint, json=request_body, timeout=_timeout(), allow_redirects=False
        )
    except RequestException:
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


def _registered_client(
    connection: ToolConnection, app_definition: AppDefinition, method: Method
) -> ClientConfig:
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
        endpoint.server_url_for(connection, app_definition, method),
        method.transport,
        operator_hosts(connection.app_slug),
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
        if row is None:  # that registration was removed again before we could read it
            raise Conflict("The sign-in setup for this app changed meanwhile. Try again.") from None
    return _client_from_registration(row)


def needs_operator_client(app_slug: str, method: Method) -> bool:
    """An OAuth method this installation cannot start: no operator client for the app and no registration
    offered. The catalog says so before any click, and setup refuses it before a draft is made (nothing
    half-made is left behind); the rule is `resolve_client`'s own, read without contacting anyone."""
    if method.auth != "oauth":
        return False
    entry = operator_clients().get(app_slug)
    if isinstance(entry, dict) and entry.get("client_id"):
        return False
    return not (method.defaults is not None and method.defaults.dynamicClientRegistration)


def app_needs_operator_client(app_definition: AppDefinition) -> bool:
    """Every method of the app needs an OAuth client the operator has not configured: nothing can connect it here."""
    return all(needs_operator_client(app_definition.slug, method) for method in app_definition.methods)


def resolve_client(connection: ToolConnection, app_definition: AppDefinition, method: Method) -> ClientConfig:
    """Operator credentials first; else the dynamic registration the method declares; else a clear refusal."""
    client = _operator_client(connection, app_definition, method)
    if client is not None:
        return client
    if method.defaults is not None and method.defaults.dynamicClientRegistration:
        return _registered_client(connection, app_definition, method)
    log.warning(
        "No OAuth client for %r: configure one in SWITCHBOARD_OAUTH_CLIENTS (the method has no dynamic registration)",
        app_definition.slug,
    )
    raise SignInNotConfigured(app_definition.name)


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
        allowed_hosts=operator_hosts(connection.app_slug),
    )


def _oauth_session(client: ClientConfig, **kwargs: Any) -> OAuth2Session:
    """Authlib's session for the client's token, revocation and authorization URLs: connections only to checked
    addresses (the app's operator hosts as named)."""
    session = OAuth2Session(
        client_id=client.client_id,
        client_secret=client.client_secret,
        token_endpoint_auth_method=client.auth_method,
        **kwargs,
    )
    guard_session(session, client.allowed_hosts)
    return session
