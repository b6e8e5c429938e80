"""Outbound URL guard: user- or agent-supplied URLs must not reach the server's own network.

A URL passes when it is http(s) and every address its host resolves to is public (not loopback, private, link-local,
multicast, reserved, or a cloud metadata address), unless the operator allow-lists the host in
`OUTBOUND_ALLOWED_HOSTS`. Operator configuration (catalog defaults, PROVIDER_SERVER_URLS) is trusted and not checked.
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import urlsplit

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


def check_outbound_url(url: str) -> str:
    """Return the URL when it is safe to call, else raise UnsafeUrl with a plain reason."""
    parts = urlsplit(url or "")
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeUrl("The URL must be an http(s) URL with a host name.")
    if parts.username or parts.password:
        raise UnsafeUrl("The URL must not contain credentials.")
    host = parts.hostname.lower()
    allowed = {h.strip().lower() for h in current_app.config.get("OUTBOUND_ALLOWED_HOSTS", []) if h.strip()}
    if host in allowed:
        return url
    try:
        infos = socket.getaddrinfo(
            host, parts.port or (443 if parts.scheme == "https" else 80), type=socket.SOCK_STREAM
        )
    except (socket.gaierror, UnicodeError):
        raise UnsafeUrl(f"The host {host} could not be resolved.") from None
    for info in infos:
        address = ipaddress.ip_address(info[4][0].split("%", 1)[0])
        if not _is_public(address):
            raise UnsafeUrl(f"The host {host} resolves to a private or local address, which is not allowed.")
    return url
