"""Outbound URL guard: user- or agent-supplied URLs must not reach the server's own network.

A URL passes when it is http(s) and every address its host resolves to is public (not loopback, private, link-local,
multicast, reserved, or a cloud metadata address), unless the operator allow-lists the host in
`OUTBOUND_ALLOWED_HOSTS`. Only the operator's settings (PROVIDER_SERVER_URLS, OAUTH_CLIENTS, the allow-list) are
trusted; a catalog definition's URLs are not (a definition may come from an imported server.json).
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
import requests
import requests.adapters
import urllib3.connection
import urllib3.connectionpool
from flask import current_app

from app.core.errors import ProviderRefused

# The deny list. Python's `ipaddress` flags (`is_global`, `is_private`, ...) follow the IANA special-purpose
# registries, but their coverage varies between Python versions (3.11 counts 100.64.0.0/10 as neither private nor
# global, 192.0.0.0/24 only in part, and 6to4 as global), so this table states every range refused, and why. The
# flags are checked too, so a range the registry adds later is refused without editing this table.
DENIED_NETWORKS: tuple[tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, str], ...] = tuple(
    (ipaddress.ip_network(network), why)
    for network, why in (
        ("0.0.0.0/8", "this network (0.0.0.0 reaches the local host)"),
        ("10.0.0.0/8", "private (RFC 1918)"),
        (
            "100.64.0.0/10",
            "shared address space (RFC 6598): carrier NAT, and cloud metadata at 100.100.100.200",
        ),
        ("127.0.0.0/8", "loopback"),
        ("169.254.0.0/16", "link-local, and cloud metadata at 169.254.169.254"),
        ("172.16.0.0/12", "private (RFC 1918)"),
        ("192.0.0.0/24", "IETF protocol assignments (RFC 6890): NAT64 discovery, DS-Lite, PCP anycast"),
        ("192.0.2.0/24", "documentation (TEST-NET-1)"),
        ("192.88.99.0/24", "6to4 relay anycast (RFC 7526, deprecated): a relay into other networks"),
        ("192.168.0.0/16", "private (RFC 1918)"),
        ("198.18.0.0/15", "benchmarking (RFC 2544), used inside labs and appliances"),
        ("198.51.100.0/24", "documentation (TEST-NET-2)"),
        ("203.0.113.0/24", "documentation (TEST-NET-3)"),
        ("224.0.0.0/4", "multicast"),
        ("240.0.0.0/4", "reserved, and 255.255.255.255 broadcast"),
        (
            "168.63.129.16/32",
            "Azure's platform address (wire server and metadata), public-looking but host-local",
        ),
        ("::/128", "unspecified"),
        ("::1/128", "loopback"),
        ("::/96", "IPv4-compatible (deprecated): wraps an IPv4 address"),
        ("64:ff9b:1::/48", "local-use NAT64 (RFC 8215): a translator inside the operator's network"),
        ("100::/64", "discard-only (RFC 6666)"),
        (
            "2001::/32",
            "Teredo (deprecated tunnel): its client address is obfuscated, so it cannot be checked",
        ),
        ("2001:db8::/32", "documentation"),
        ("fc00::/7", "unique local (the IPv6 private range), and AWS metadata at fd00:ec2::254"),
        ("fe80::/10", "link-local"),
        ("fec0::/10", "site-local (deprecated, still routed inside some sites)"),
        ("ff00::/8", "multicast"),
    )
)

# IPv6 prefixes that carry an IPv4 address the packet is delivered to; the embedded address is judged instead.
NAT64_WELL_KNOWN = ipaddress.ip_network("64:ff9b::/96")  # RFC 6052: DNS64/NAT64 translate to the low 32 bits
SIX_TO_FOUR = ipaddress.ip_network("2002::/16")  # RFC 3056: the 32 bits after the prefix are the IPv4 address

# Named for tests and documentation: the cloud metadata services, each inside a denied range above.
METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a) for a in ("169.254.169.254", "100.100.100.200", "fd00:ec2::254", "168.63.129.16")
)


class UnsafeUrl(ProviderRefused):
    pass


class UnresolvedHost(UnsafeUrl):
    """The host name does not resolve (now): nothing is reached, and it is checked again at connect time."""


def _embedded_ipv4(address: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv4-mapped, NAT64 (well-known prefix) or 6to4 IPv6 address delivers to, if any."""
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in NAT64_WELL_KNOWN:
        return ipaddress.IPv4Address(int(address) & 0xFFFFFFFF)
    if address in SIX_TO_FOUR:
        return address.sixtofour
    return None


def _is_public(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if isinstance(address, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(address)
        if embedded is not None:
            return _is_public(embedded)
    if any(address in network for network, _why in DENIED_NETWORKS if network.version == address.version):
        return False
    return address.is_global and not (
        address.is_loopback
        or address.is_private
        or address.is_link_local
        or address.is_multicast
        or address.is_reserved
        or address.is_unspecified
        or (isinstance(address, ipaddress.IPv6Address) and address.is_site_local)
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
        raise UnresolvedHost(f"The host {host} could not be resolved.") from None
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
        if isinstance(exc, connect_error):
            raise
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


# The same pinning for `requests` (the OAuth calls: discovery, registration, token, userinfo and revocation, through
# Authlib's requests session): urllib3 connects to `_dns_host`, which each connection sets to an address it has just
# checked; the TLS handshake still verifies the URL's host name (`server_hostname` is the host, not the address).


class RefusedAddress(OSError):
    """The host's addresses are not allowed (raised inside urllib3; requests reports a ConnectionError)."""


class _PinnedConnectionMixin(urllib3.connection.HTTPConnection):
    allowed_hosts: frozenset[str] = frozenset()

    def _new_conn(self) -> socket.socket:
        error: Exception | None = None
        for address in _checked_addresses(self.host, self.port, self.allowed_hosts, RefusedAddress):
            self._dns_host = address
            try:
                return super()._new_conn()
            except (OSError, urllib3.exceptions.HTTPError) as exc:
                error = exc
        raise error or RefusedAddress(f"The host {self.host} could not be reached.")


class _PinnedAdapter(requests.adapters.HTTPAdapter):
    def __init__(self, allowed_hosts: frozenset[str]) -> None:
        self.allowed_hosts = allowed_hosts
        super().__init__()

    def init_poolmanager(self, *args: Any, **kwargs: Any) -> None:
        super().init_poolmanager(*args, **kwargs)
        attributes = {"allowed_hosts": self.allowed_hosts}
        pinned_http = type("PinnedHTTPConnection", (_PinnedConnectionMixin,), attributes)
        pinned_https = type(
            "PinnedHTTPSConnection", (_PinnedConnectionMixin, urllib3.connection.HTTPSConnection), attributes
        )
        self.poolmanager.pool_classes_by_scheme = {
            "http": type(
                "PinnedHTTPPool", (urllib3.connectionpool.HTTPConnectionPool,), {"ConnectionCls": pinned_http}
            ),
            "https": type(
                "PinnedHTTPSPool",
                (urllib3.connectionpool.HTTPSConnectionPool,),
                {"ConnectionCls": pinned_https},
            ),
        }


def guard_session(session: requests.Session, allowed_hosts: frozenset[str] | None = None) -> requests.Session:
    """Make `session` (a plain or an Authlib requests session) connect only to checked addresses: hosts in
    `allowed_hosts` (default: the operator's allow-list) as named, every other host to addresses that passed the
    guard just before the connection. No proxy from the environment (it would connect on our behalf)."""
    allowed = outbound_allowed_hosts() if allowed_hosts is None else allowed_hosts
    session.trust_env = False
    adapter = _PinnedAdapter(allowed)
    session.mount("http://", adapter)
    session.mount("https://", adapter)
    return session


def guarded_session(allowed_hosts: frozenset[str] | None = None) -> requests.Session:
    """A requests session for URLs providers or users supplied (see `guard_session`)."""
    return guard_session(requests.Session(), allowed_hosts)
