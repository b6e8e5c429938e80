"""Outbound URL guard: user- or agent-supplied URLs must not reach the server's own network.

A URL passes when it is http(s) and every address its host resolves to is public (not loopback, private, link-local,
multicast, reserved, or a cloud metadata address), unless the operator allow-lists the host in
`OUTBOUND_ALLOWED_HOSTS`. Operator configuration (catalog defaults, PROVIDER_SERVER_URLS) is trusted and not checked.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

import httpcore
import httpx
from flask import current_app

from app.services.errors import ProviderRefused

METADATA_ADDRESSES = {ipaddress.ip_address("169.254.169.254"), ipaddress.ip_address("fd00:ec2::254")}


class UnsafeUrl(ProviderRefused):
    pass


def _is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped:
        address = address.ipv4_mapped
    return not (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or address in METADATA_ADDRESSES
    )


def _allowed_hosts() -> set[str]:
    return {h.strip().lower() for h in current_app.config.get("OUTBOUND_ALLOWED_HOSTS", []) if h.strip()}


def public_addresses(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, when every one of them is public; else UnsafeUrl."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise UnsafeUrl(f"The host {host} could not be resolved.") from None
    addresses = []
    for info in infos:
        address = info[4][0].split("%", 1)[0]
        if not _is_public(ipaddress.ip_address(address)):
            raise UnsafeUrl(f"The host {host} resolves to a private or local address, which is not allowed.")
        addresses.append(address)
    return list(dict.fromkeys(addresses))


def check_outbound_url(url: str) -> str:
    """Return the URL when it is safe to call, else raise UnsafeUrl with a plain reason."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeUrl("The URL must be an http(s) URL with a host name.")
    if parts.username or parts.password:
        raise UnsafeUrl("The URL must not contain credentials.")
    host = parts.hostname.lower()
    if host not in _allowed_hosts():
        public_addresses(host, parts.port or (443 if parts.scheme == "https" else 80))
    return url


class _PinnedBackend(httpcore.SyncBackend):
    """Connects only to addresses it has just checked, so a name cannot resolve to a public address for the check
    and to a private one for the connection (DNS rebinding). TLS still verifies the certificate for the URL's
    host name: httpcore passes that name, not the address, to the TLS handshake."""

    def __init__(self, allowed_hosts: set[str]):
        self.allowed_hosts = allowed_hosts

    def connect_tcp(self, host: str, port: int, timeout=None, local_address=None, socket_options=None):
        if host.lower() in self.allowed_hosts:
            return super().connect_tcp(host, port, timeout, local_address, socket_options)
        try:
            addresses = public_addresses(host, port)
        except UnsafeUrl as exc:
            raise httpcore.ConnectError(str(exc)) from None
        error: Exception | None = None
        for address in addresses:
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:  # try the next checked address, as the resolver would
                error = exc
        raise error or httpcore.ConnectError(f"The host {host} could not be reached.")


def guarded_transport() -> httpx.HTTPTransport:
    """An httpx transport for URLs users or agents supplied: every connection goes to a checked public address
    (or to an operator-allowed host)."""
    transport = httpx.HTTPTransport(trust_env=False)
    # httpx has no public hook for the network backend; its pool (httpcore, pinned in pyproject) reads this.
    transport._pool._network_backend = _PinnedBackend(_allowed_hosts())
    return transport
