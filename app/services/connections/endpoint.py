"""Where a connection's provider is reached: the server URL, the outbound guard, credentials and headers."""

from __future__ import annotations

from flask import current_app
from sqlalchemy import select

from app.catalog.loader import get_method
from app.core.errors import ProviderRefused
from app.core.net_guard import check_outbound_url, outbound_allowed_hosts
from app.extensions import db
from app.models import (
    ConnectionGrant,
    GrantSecret,
    ToolConnection,
)
from app.services.connections import provider_tools
from app.services.secrets_box import decrypt

# Secret keys under which OAuth grants keep their tokens (encrypted like every credential).
OAUTH_ACCESS_TOKEN_KEY = "oauth_access_token"  # noqa: S105 (a key name, not a secret)
OAUTH_REFRESH_TOKEN_KEY = "oauth_refresh_token"  # noqa: S105 (a key name, not a secret)


def _member_server_url(connection: ToolConnection, method, secrets: dict[str, str] | None) -> str | None:
    """The server address a member typed into the field the definition marks as the server URL (a tenant field is
    in the connection's `methodConfig`, a credential field in the grant's `secrets`), when it is the one used: an
    operator override wins."""
    overrides = current_app.config.get("PROVIDER_SERVER_URLS") or {}
    field = method.server_url_field if method is not None else None
    if field is None or overrides.get(connection.app_slug):
        return None
    if any(field is f for f in method.credentialFields):
        return (secrets or {}).get(field.key) or None
    return connection.method_config.get(field.key) or None


def provider_guard(
    connection: ToolConnection, method, secrets: dict[str, str] | None = None
) -> frozenset[str] | None:
    """For a member-typed server URL, the outbound guard's allowed hosts: its MCP client then connects only to
    addresses checked at connect time. None for operator-configured URLs, which are trusted."""
    return outbound_allowed_hosts() if _member_server_url(connection, method, secrets) else None


def server_url_for(
    connection: ToolConnection, app_definition, method, secrets: dict[str, str] | None = None
) -> str:
    """The provider MCP endpoint: an operator override, the member's value of the field the definition marks as the
    server URL (`secrets` are the grant's credentials, for a credential field), or the method's default."""
    overrides = current_app.config.get("PROVIDER_SERVER_URLS") or {}
    url = overrides.get(connection.app_slug)
    member_url = _member_server_url(connection, method, secrets)
    if not url and member_url:
        # A URL typed by a member reaches our network only through the outbound guard.
        url = check_outbound_url(member_url)
    if not url and method.defaults is not None:
        url = method.defaults.serverUrl
    if not url:
        raise ProviderRefused("This connection has no MCP server URL configured.")
    return str(url)


def stored_secrets(grant: ConnectionGrant) -> dict[str, str]:
    rows = db.session.scalars(select(GrantSecret).where(GrantSecret.grant_id == grant.id))
    return {row.key: decrypt(row.ciphertext) for row in rows}


def provider_headers(method, secrets: dict[str, str]) -> tuple[dict, dict]:
    """Headers and query parameters that carry the credential as the definition places it."""
    if method.auth == "oauth":
        token = secrets.get(OAUTH_ACCESS_TOKEN_KEY)
        return ({"Authorization": f"Bearer {token}"} if token else {}), {}
    if method.auth != "api_key" or method.keyPlacement is None:
        return {}, {}
    secret_fields = [f for f in method.credentialFields if f.secret]
    key_field = secret_fields[0] if secret_fields else None
    value = secrets.get(key_field.key) if key_field else None
    if not value:
        return {}, {}
    return provider_tools.headers_for_key(method.keyPlacement.model_dump(), value)


def connection_endpoint(
    connection: ToolConnection, app_definition, grant: ConnectionGrant
) -> tuple[str, dict]:
    """URL (with any query credential) and headers to reach the provider as this grant. Used by the gateway too."""
    method = get_method(app_definition, connection.method_key)
    secrets = stored_secrets(grant)
    headers, query = provider_headers(method, secrets)
    url = server_url_for(connection, app_definition, method, secrets)
    if query:
        url = provider_tools.url_with_query(url, query)
    return url, headers
