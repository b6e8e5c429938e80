"""Finding the authorization server: RFC 9728 protected-resource metadata, then RFC 8414 or OpenID Connect metadata."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

import mcp_types
import requests
from flask import current_app

from app.catalog.schema import Transport
from app.core import mcp_messages, mcp_versions
from app.core.errors import (
    ProviderRefused,
)
from app.core.mcp_messages import CLIENT_INFO
from app.core.net_guard import UnsafeUrl, check_outbound_url, guarded_session

# -- configuration and metadata ----------------------------------------------------------------------------------


def _timeout() -> float:
    return float(current_app.config.get("OUTBOUND_TIMEOUT_SECONDS", 10))


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
    revocation_endpoint: str | None = None  # RFC 7009, when the metadata names one

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
            revocation_endpoint=meta.get("revocation_endpoint"),
        )

    @property
    def supports_pkce_s256(self) -> bool:
        # Unknown (not advertised) counts as supported: servers ignore parameters they do not know.
        return self.code_challenge_methods is None or "S256" in self.code_challenge_methods


def _guard(url: str, allowed: frozenset[str]) -> str:
    """A URL learned from a provider: allowed on a host the operator named (`operator_hosts`), else it must pass the
    guard. This is the early, readable refusal; the connection itself is pinned (`guarded_session`), so a name that
    resolves to a public address here and to an internal one at connect time reaches nothing."""
    host = (urlsplit(url).hostname or "").lower()
    if urlsplit(url).scheme not in ("http", "https") or not host:
        raise ProviderRefused("The provider published an invalid authorization server address.")
    if host in allowed:
        return url
    try:
        return check_outbound_url(url)
    except UnsafeUrl as err:
        raise ProviderRefused(f"The provider's authorization server is not allowed: {err}") from None


def operator_hosts(app_slug: str) -> frozenset[str]:
    """The hosts an app's OAuth calls may reach without the guard: the operator's allow-list, the host of the app's
    PROVIDER_SERVER_URLS entry and those of its SWITCHBOARD_OAUTH_CLIENTS entry. Every other host (a member's or a
    definition's server, what metadata names) is checked at connect time."""
    from app.core.net_guard import outbound_allowed_hosts

    urls = [(current_app.config.get("PROVIDER_SERVER_URLS") or {}).get(app_slug)]
    entry = (current_app.config.get("OAUTH_CLIENTS") or {}).get(app_slug)
    if isinstance(entry, dict):
        urls += [
            entry.get(k) for k in ("issuer", "authorization_endpoint", "token_endpoint", "userinfo_endpoint")
        ]
    hosts = {(urlsplit(u).hostname or "").lower() for u in urls if isinstance(u, str) and u}
    return outbound_allowed_hosts() | (hosts - {""})


def _get_json(url: str, allowed: frozenset[str]) -> dict | None:
    try:
        response = guarded_session(allowed).get(
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


def _resource_metadata_hint(server_url: str, transport: Transport, allowed: frozenset[str]) -> str | None:
    """An unauthenticated request to the server: a 401 may name the metadata in `WWW-Authenticate:
    resource_metadata`. Streamable HTTP gets an initialize POST; an HTTP+SSE server's URL is its GET event stream
    (a POST there is usually 405), so it gets the GET that opens the stream instead."""
    if transport == "sse":
        return _event_stream_hint(server_url, allowed)
    initialize = mcp_types.InitializeRequest(
        params=mcp_types.InitializeRequestParams(
            protocol_version=mcp_versions.BASELINE,
            capabilities=mcp_types.ClientCapabilities(),
            client_info=CLIENT_INFO,
        )
    )
    body = mcp_messages.request(1, initialize)
    try:
        response = guarded_session(allowed).post(
            server_url,
            json=body,
            timeout=_timeout(),
            allow_redirects=False,
            headers={"Accept": "application/json, text/event-stream"},
        )
    except requests.RequestException:
        return None
    return _challenge_hint(response)


def _event_stream_hint(server_url: str, allowed: frozenset[str]) -> str | None:
    """GET the event stream, read only the status and headers, and close at once: should the server open the
    stream (it needs no token), no event is waited for or read."""
    try:
        with guarded_session(allowed).get(
            server_url,
            stream=True,
            timeout=_timeout(),
            allow_redirects=False,
            headers={"Accept": "text/event-stream"},
        ) as response:
            return _challenge_hint(response)
    except requests.RequestException:
        return None


def _challenge_hint(response: requests.Response) -> str | None:
    """The `resource_metadata` URL of a 401's `WWW-Authenticate` challenge (RFC 9728 section 5.1), if any."""
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


def fetch_server_metadata(issuer: str, allowed: frozenset[str]) -> AuthServer:
    """RFC 8414 then OpenID Connect discovery for an issuer; the metadata must name that same issuer. `allowed`:
    the app's `operator_hosts`."""
    candidates = _well_known(issuer, "oauth-authorization-server") + _well_known(
        issuer, "openid-configuration"
    )
    candidates.append(issuer.rstrip("/") + "/.well-known/openid-configuration")
    for url in dict.fromkeys(candidates):
        meta = _get_json(_guard(url, allowed), allowed)
        if not meta or not meta.get("authorization_endpoint") or not meta.get("token_endpoint"):
            continue
        if meta.get("issuer") and meta["issuer"].rstrip("/") != issuer.rstrip("/"):
            continue  # RFC 8414 section 3.3: a mismatched issuer must not be used
        for key in ("authorization_endpoint", "token_endpoint", "registration_endpoint", "userinfo_endpoint"):
            if meta.get(key):
                _guard(meta[key], allowed)
        return AuthServer.from_metadata(meta)
    raise ProviderRefused("Could not read the provider's authorization server metadata.")


def discover_authorization_server(
    server_url: str, transport: Transport, allowed: frozenset[str]
) -> AuthServer:
    """From an MCP server URL to its authorization server: RFC 9728 (hint, path-insert, root), else the origin.
    `transport` is the method's: it decides how the server is asked for the hint. `allowed`: the app's
    `operator_hosts`; every other host is checked, and connected to at the checked address only."""
    locations = []
    hint = _resource_metadata_hint(server_url, transport, allowed)
    if hint:
        locations.append(_guard(hint, allowed))
    locations += _well_known(server_url, "oauth-protected-resource")
    for url in dict.fromkeys(locations):
        meta = _get_json(_guard(url, allowed), allowed)
        servers = (meta or {}).get("authorization_servers") or []
        if servers and isinstance(servers[0], str):
            return fetch_server_metadata(_guard(servers[0], allowed), allowed)
    parts = urlsplit(server_url)
    # No protected-resource metadata: older MCP servers are their own authorization server.
    return fetch_server_metadata(urlunsplit((parts.scheme, parts.netloc, "", "", "")), allowed)
