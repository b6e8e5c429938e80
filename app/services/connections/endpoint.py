"""Where a connection's provider is reached: the server URL, the outbound guard, credentials and headers."""

from __future__ import annotations

import functools
import re
import uuid

from flask import current_app
from sqlalchemy import Select, bindparam, select

from app.adapters.providers import mcp_client
from app.adapters.providers import tools as provider_tools
from app.catalog.loader import get_method
from app.catalog.schema import URL_VARIABLE, AppDefinition, Method
from app.core.errors import ProviderRefused
from app.core.net_guard import check_outbound_url, outbound_allowed_hosts
from app.extensions import db
from app.models import (
    ConnectionGrant,
    GrantSecret,
    ToolConnection,
)
from app.services.secrets_box import decrypt

# Secret keys under which OAuth grants keep their tokens (encrypted like every credential).
OAUTH_ACCESS_TOKEN_KEY = "oauth_access_token"  # noqa: S105 (a key name, not a secret)
OAUTH_REFRESH_TOKEN_KEY = "oauth_refresh_token"  # noqa: S105 (a key name, not a secret)


def _member_server_url(
    connection: ToolConnection, method: Method, secrets: dict[str, str] | None
) -> str | None:
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


def operator_url(connection: ToolConnection) -> str | None:
    """The operator's server URL for this app (`SWITCHBOARD_PROVIDER_SERVER_URLS`): the only URL that may point
    inside the operator's network without the allow-list."""
    overrides = current_app.config.get("PROVIDER_SERVER_URLS") or {}
    return overrides.get(connection.app_slug) or None


def max_response_bytes() -> int:
    """The most of one HTTP answer a provider exchange reads (`PROVIDER_MAX_RESPONSE_BYTES`)."""
    return int(current_app.config.get("PROVIDER_MAX_RESPONSE_BYTES", mcp_client.DEFAULT_MAX_RESPONSE_BYTES))


def provider_guard(
    connection: ToolConnection, method: Method, secrets: dict[str, str] | None = None
) -> frozenset[str] | None:
    """The outbound guard's allowed hosts for every server URL but the operator's: its MCP client then connects
    only to addresses checked at connect time. A definition's default is not trusted: it may come from an imported
    server.json (`switchboard catalog import`), as untrusted as a member-typed URL. None for the operator's URL."""
    return None if operator_url(connection) else outbound_allowed_hosts()


def server_url_for(
    connection: ToolConnection,
    app_definition: AppDefinition,
    method: Method,
    secrets: dict[str, str] | None = None,
) -> str:
    """The provider MCP endpoint: an operator override, the member's value of the field the definition marks as the
    server URL (`secrets` are the grant's credentials, for a credential field), or the method's default. All but the
    operator's pass the outbound guard here, and again at connect time (`provider_guard`)."""
    overrides = current_app.config.get("PROVIDER_SERVER_URLS") or {}
    url = overrides.get(connection.app_slug)
    member_url = _member_server_url(connection, method, secrets)
    if not url and member_url:
        # A URL typed by a member reaches our network only through the outbound guard.
        url = check_outbound_url(member_url)
    if not url and method.defaults is not None and method.defaults.serverUrl:
        url = method.defaults.serverUrl
        if URL_VARIABLE.search(url):
            # A template filled with the member's values reaches our network only through the outbound guard.
            url = check_outbound_url(_filled_url(url, method, connection.method_config or {}))
        else:
            # So does a definition's default: it may come from an imported server.json.
            url = check_outbound_url(url)
    if not url:
        raise ProviderRefused("This connection has no MCP server URL configured.")
    return str(url)


# One host (with its port) or path segment: never a scheme, credentials, another path, a query or a fragment.
URL_VALUE = re.compile(r"^[A-Za-z0-9._~-]+(:[0-9]{1,5})?$")


def _filled_url(template: str, method: Method, config: dict) -> str:
    """The server URL template with each `{variable}` replaced by its field's value (one label or segment)."""
    fields = {f.urlVariable: f for f in method.tenantFields if f.urlVariable}

    def value(match: re.Match) -> str:
        field = fields[match.group(1)]
        text = str(config.get(field.key) or field.defaultValue or "").strip()
        if not text:
            raise ProviderRefused(f"Enter {field.label} to reach this server.")
        if not URL_VALUE.match(text):
            raise ProviderRefused(
                f"{field.label} may hold letters, digits, dots, dashes and underscores only."
            )
        return text

    return URL_VARIABLE.sub(value, template)


def config_headers(method: Method, config: dict) -> dict[str, str]:
    """The public tenant values the definition sends as request headers (never a credential header)."""
    headers = {}
    for field in method.tenantFields:
        raw = config.get(field.key)
        if not field.header or raw in (None, ""):
            continue
        text = str(raw)
        if any(ord(c) < 32 or ord(c) == 127 for c in text):
            raise ProviderRefused(
                f"{field.label} cannot be sent to the provider: it holds control characters."
            )
        headers[field.header] = text
    return headers


@functools.cache
def _connection_with_secrets_statement() -> Select:
    """`connection_with_secrets`' statement for `connection_id` and `grant_id` parameters, built once."""
    return (
        select(ToolConnection, ConnectionGrant, GrantSecret.key, GrantSecret.ciphertext)
        .join(ConnectionGrant, ConnectionGrant.connection_id == ToolConnection.id)
        .outerjoin(GrantSecret, GrantSecret.grant_id == ConnectionGrant.id)
        .where(ToolConnection.id == bindparam("connection_id"), ConnectionGrant.id == bindparam("grant_id"))
    )


def connection_with_secrets(
    connection_id: uuid.UUID, grant_id: uuid.UUID
) -> tuple[ToolConnection | None, ConnectionGrant | None, dict[str, str]]:
    """The connection, its grant `grant_id` and the grant's decrypted credentials, in one statement (a gateway call
    pays this on every call). (None, None, {}) when the grant is not the connection's."""
    rows = db.session.execute(
        _connection_with_secrets_statement(), {"connection_id": connection_id, "grant_id": grant_id}
    ).all()
    if not rows:
        return None, None, {}
    secrets = {key: decrypt(ciphertext) for _c, _g, key, ciphertext in rows if key is not None}
    return rows[0][0], rows[0][1], secrets


def stored_secrets(grant: ConnectionGrant) -> dict[str, str]:
    rows = db.session.scalars(select(GrantSecret).where(GrantSecret.grant_id == grant.id))
    return {row.key: decrypt(row.ciphertext) for row in rows}


def grant_holds_credentials(connection: ToolConnection, grant: ConnectionGrant) -> bool:
    """Whether the grant can reach its provider: its connection's method needs no credentials, or the grant holds
    one (stored when a setup or sign-in of this grant was verified). A grant made for a setup that someone else
    finished holds none."""
    if connection.auth_kind == "none":
        return True
    held = select(GrantSecret.id).where(GrantSecret.grant_id == grant.id).limit(1)
    return db.session.scalar(held) is not None


def provider_headers(method: Method, secrets: dict[str, str]) -> tuple[dict, dict]:
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
    connection: ToolConnection,
    app_definition: AppDefinition,
    grant: ConnectionGrant,
    secrets: dict[str, str] | None = None,
) -> tuple[str, dict]:
    """URL (with any query credential) and headers to reach the provider as this grant (`secrets`: its stored
    credentials, when the caller has read them already). Used by the gateway too."""
    method = get_method(app_definition, connection.method_key)
    secrets = stored_secrets(grant) if secrets is None else secrets
    headers, query = provider_headers(method, secrets)
    headers = {**config_headers(method, connection.method_config or {}), **headers}
    url = server_url_for(connection, app_definition, method, secrets)
    if query:
        url = provider_tools.url_with_query(url, query)
    return url, headers
