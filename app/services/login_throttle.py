"""Sign-in throttling per (email, client address): a stranger's wrong passwords slow the stranger, not the owner.

Failed sign-ins are counted per pair of normalized email and client address in a moving window
(`LOGIN_MAX_FAILURES` per `LOGIN_FAILURE_WINDOW_SECONDS`). Once a pair reaches the limit, that pair is refused,
even with the right password, until old failures leave the window; the same email from another address, and other
emails from the same address, are unaffected. A successful sign-in clears its pair.

The counters live in a `limits` storage (the library under Flask-Limiter): in-process memory by default, or the
storage URI in `LOGIN_THROTTLE_STORAGE_URI` (e.g. `redis://host:6379/0`; `limits` also speaks memcached and MongoDB)
so that several server processes share one count. With memory storage each process counts on its own.
Identifiers are hashed, so emails and addresses never reach the storage in clear.

Guessing across identities is limited too (issue 33): every failed authentication from one client address (a wrong
password for any email, an unknown or revoked API key, a missing or invalid run token) counts towards
`AUTH_ADDRESS_MAX_FAILURES` per `AUTH_ADDRESS_WINDOW_SECONDS` in the same storage. Once an address reaches it, that
address's sign-ins and credential-bearing requests (API keys, the agent doors) are answered 429 with Retry-After,
before any credential is checked, until old failures leave the window (`app/web/auth_throttle.py`).

The client address is the one the WSGI server saw (`request.remote_addr`), which is the last proxy's address
unless `SWITCHBOARD_TRUSTED_PROXIES` says how many proxies' `X-Forwarded-For` entries to trust (see `app/__init__.py`).
"""

from __future__ import annotations

import hashlib
import math
import time

from flask import Flask, current_app
from limits import RateLimitItemPerSecond, storage, strategies

EXTENSION_KEY = "switchboard.login_throttle"


def init_app(app: Flask) -> None:
    backend = storage.storage_from_string(app.config.get("LOGIN_THROTTLE_STORAGE_URI") or "memory://")
    if isinstance(backend, storage.MovingWindowSupport):
        limiter: strategies.RateLimiter = strategies.MovingWindowRateLimiter(backend)
    else:
        limiter = strategies.FixedWindowRateLimiter(backend)
    app.extensions[EXTENSION_KEY] = (backend, limiter)


def _limiter() -> strategies.RateLimiter:
    return current_app.extensions[EXTENSION_KEY][1]


def _limit() -> RateLimitItemPerSecond:
    config = current_app.config
    return RateLimitItemPerSecond(
        max(1, int(config["LOGIN_MAX_FAILURES"])), max(1, int(config["LOGIN_FAILURE_WINDOW_SECONDS"]))
    )


def _key(email: str, remote_addr: str | None) -> str:
    return hashlib.sha256(f"{email}\n{remote_addr or '-'}".encode()).hexdigest()[:40]


def retry_after(email: str, remote_addr: str | None) -> int | None:
    """Seconds until this pair may try again, or None when it may try now."""
    limit, key = _limit(), _key(email, remote_addr)
    if _limiter().test(limit, "login", key):
        return None
    reset_at = _limiter().get_window_stats(limit, "login", key).reset_time
    return max(1, math.ceil(reset_at - time.time()))


def record_failure(email: str, remote_addr: str | None) -> None:
    _limiter().hit(_limit(), "login", _key(email, remote_addr))


def clear(email: str, remote_addr: str | None) -> None:
    _limiter().clear(_limit(), "login", _key(email, remote_addr))


def _address_limit() -> RateLimitItemPerSecond:
    config = current_app.config
    return RateLimitItemPerSecond(
        max(1, int(config["AUTH_ADDRESS_MAX_FAILURES"])), max(1, int(config["AUTH_ADDRESS_WINDOW_SECONDS"]))
    )


def _address_key(remote_addr: str | None) -> str:
    return hashlib.sha256(f"address\n{remote_addr or '-'}".encode()).hexdigest()[:40]


def address_retry_after(remote_addr: str | None) -> int | None:
    """Seconds until this client address may try to authenticate again, or None when it may try now."""
    limit, key = _address_limit(), _address_key(remote_addr)
    if _limiter().test(limit, "auth-address", key):
        return None
    reset_at = _limiter().get_window_stats(limit, "auth-address", key).reset_time
    return max(1, math.ceil(reset_at - time.time()))


def record_address_failure(remote_addr: str | None) -> None:
    """One failed authentication of any kind from this address."""
    _limiter().hit(_address_limit(), "auth-address", _address_key(remote_addr))


def reset() -> None:
    """Forget every counter (tests)."""
    current_app.extensions[EXTENSION_KEY][0].reset()
