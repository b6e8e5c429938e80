"""Outbound URL guard: user- or agent-supplied URLs must not reach the server's own network.

A URL passes when it is http(s) and every address its host resolves to is public (not loopback, private, link-local,
multicast, reserved, or a cloud metadata address), unless the operator allow-lists the host in
`OUTBOUND_ALLOWED_HOSTS`. Operator configuration (catalog defaults, PROVIDER_SERVER_URLS) is trusted and not checked.
"""

from __future__ import annotations

import ipaddress
import socket
import ssl
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

import anyio
import httpcore
import httpcore2
import httpx
import httpx2
from flask import current_app

from app.core.errors import ProviderRefused

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


def outbound_allowed_hosts() -> frozenset[str]:
    """The operator's allow-list, read in the app context (pinned transports may run outside it)."""
    return frozenset(
        h.strip().lower() for h in current_app.config.get("OUTBOUND_ALLOWED_HOSTS", []) if h.strip()
    )


def public_addresses(host: str, port: int) -> list[str]:
    """The addresses `host` resolves to, when every one of them is public; else UnsafeUrl."""
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError):
        raise UnsafeUrl(f"The host {host} could not be resolved.") from None
    addresses = []
    for info in infos:
        # sockaddr[0] is the address text for AF_INET/AF_INET6 (typeshed also allows an int for AF_CAN).
        address = str(info[4][0]).split("%", 1)[0]
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
    port = parts.port or (443 if parts.scheme == "https" else 80)
    _checked_addresses(parts.hostname.lower(), port, outbound_allowed_hosts(), UnsafeUrl)
    return url


def _checked_addresses(host: str, port: int, allowed_hosts: frozenset[str], connect_error: type) -> list[str]:
    """What a pinned backend may connect to: the operator-allowed host as named, else its checked addresses."""
    if host.lower() in allowed_hosts:
        return [host]
    try:
        return public_addresses(host, port)
    except UnsafeUrl as exc:
        raise connect_error(str(exc)) from None


# Pinned backends connect only to addresses they have just checked, so a name cannot resolve to a public address for
# the check and to a private one for the connection (DNS rebinding). TLS still verifies the certificate for the URL's
# host name: the pool passes that name, not the address, to the TLS handshake. An unreachable address falls through
# to the next one, as the resolver would.


class _PinnedBackend(httpcore.SyncBackend):
    def __init__(self, allowed_hosts: frozenset[str]) -> None:
        self.allowed_hosts = allowed_hosts

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        error: Exception | None = None
        for address in _checked_addresses(host, port, self.allowed_hosts, httpcore.ConnectError):
            try:
                return super().connect_tcp(address, port, timeout, local_address, socket_options)
            except httpcore.ConnectError as exc:
                error = exc
        raise error or httpcore.ConnectError(f"The host {host} could not be reached.")


class _PinnedAsyncBackend(httpcore2.AnyIOBackend):
    def __init__(self, allowed_hosts: frozenset[str]) -> None:
        self.allowed_hosts = allowed_hosts

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore2.AsyncNetworkStream:
        addresses = await anyio.to_thread.run_sync(
            _checked_addresses, host, port, self.allowed_hosts, httpcore2.ConnectError
        )
        error: Exception | None = None
        for address in addresses:
            try:
                return await super().connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except httpcore2.ConnectError as exc:
                error = exc
        raise error or httpcore2.ConnectError(f"The host {host} could not be reached.")


# httpx has no public hook for the network backend; the pools (httpcore and httpcore2, pinned in pyproject) read it.


def guarded_transport() -> httpx.HTTPTransport:
    """A transport for URLs users or agents supplied (sync httpx): connections go only to checked addresses."""
    transport = httpx.HTTPTransport(trust_env=False)
    transport._pool._network_backend = _PinnedBackend(outbound_allowed_hosts())
    return transport


def guarded_async_transport(
    allowed_hosts: frozenset[str], verify: ssl.SSLContext | bool = True
) -> httpx2.AsyncHTTPTransport:
    """The same for the MCP client (httpx2, asyncio); `verify` may be a shared SSL context (built once)."""
    transport = httpx2.AsyncHTTPTransport(trust_env=False, verify=verify)
    transport._pool._network_backend = _PinnedAsyncBackend(allowed_hosts)
    return transport
