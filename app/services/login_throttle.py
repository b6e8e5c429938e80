"""Sign-in throttling per (email, client address): a stranger's wrong passwords slow the stranger, not the owner.

Failed sign-ins are counted per pair of normalized email and client address in a moving window
(`LOGIN_MAX_FAILURES` per `LOGIN_FAILURE_WINDOW_SECONDS`). Once a pair reaches the limit, that pair is refused,
even with the right password, until old failures leave the window; the same email from another address, and other
emails from the same address, are unaffected. An attempt is counted before its password is checked and a
successful sign-in clears its pair, so what stays counted are the failures (`take_attempt`).

The counters live in a `limits` storage (the library under Flask-Limiter). By default that is the app's own database
(`throttle_store.DatabaseStorage`, PostgreSQL or the embedded SQLite), so every server process and every instance
sees one count without another server. `LOGIN_THROTTLE_STORAGE_URI` may name another `limits` storage instead
(e.g. `redis://host:6379/0`; `limits` also speaks memcached and MongoDB; `memory://` counts per process, for a
single process only). When the storage cannot be reached, sign-in and the credential-bearing doors answer 503
(`ThrottleUnavailable`): a guess is never checked without being counted. Readiness (`/readyz`) reports the store.
Identifiers are hashed, so emails and addresses never reach the storage in clear.

Guessing across identities is limited too (one address must not try many accounts): every failed
authentication from one client address (a wrong password for any email, an unknown or revoked API key, a
missing or invalid run token) counts towards `AUTH_ADDRESS_MAX_FAILURES` per `AUTH_ADDRESS_WINDOW_SECONDS` in
the same storage. Once an address reaches it, that address's sign-ins and credential-bearing requests (API
keys, the agent doors) are answered 429 with Retry-After, before any credential is checked, until old failures
leave the window (`app/web/auth_throttle.py`).

The client address is the one the WSGI server saw (`request.remote_addr`), which is the last proxy's address
unless `SWITCHBOARD_TRUSTED_PROXIES` says how many proxies' `X-Forwarded-For` entries to trust (see `app/__init__.py`).
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable
from functools import wraps
from typing import ParamSpec, TypeVar

from flask import Flask, current_app
from limits import RateLimitItemPerSecond, storage, strategies
from limits.errors import StorageError

from app.core.errors import ServiceError
from app.extensions import db
from app.services.throttle_store import DatabaseStorage

EXTENSION_KEY = "switchboard.login_throttle"
DATABASE_STORE = "database"
# A network store that stops answering must not hold sign-in for long: seconds to connect and to answer (a URI's own
# `socket_timeout` / `socket_connect_timeout` query parameters win).
NETWORK_STORE_TIMEOUT_SECONDS = 2.0
UNAVAILABLE_RETRY_AFTER_SECONDS = 60
UNAVAILABLE_MESSAGE = (
    "Sign-in is unavailable right now: the failed sign-in counter cannot be reached. Try again in a minute."
)

P = ParamSpec("P")
R = TypeVar("R")


class ThrottleUnavailable(ServiceError):
    """The counters' storage did not answer: nothing may be checked uncounted, so the request is refused (503)."""

    status = 503
    retry_after = UNAVAILABLE_RETRY_AFTER_SECONDS

    def __init__(self) -> None:
        super().__init__(UNAVAILABLE_MESSAGE)


def make_storage(app: Flask) -> storage.Storage:
    uri = (app.config.get("LOGIN_THROTTLE_STORAGE_URI") or DATABASE_STORE).strip()
    if uri == DATABASE_STORE:
        with app.app_context():
            return DatabaseStorage(db.engine)
    options: dict[str, float | str | bool] = {}
    if uri.split(":", 1)[0] in ("redis", "rediss", "redis+unix", "valkey", "valkeys", "valkey+unix"):
        options = {
            "socket_connect_timeout": NETWORK_STORE_TIMEOUT_SECONDS,
            "socket_timeout": NETWORK_STORE_TIMEOUT_SECONDS,
        }
    backend = storage.storage_from_string(uri, wrap_exceptions=True, **options)
    if not isinstance(backend, storage.Storage):
        raise ValueError(f"{uri.split(':', 1)[0]}: an asynchronous storage cannot keep the sign-in counters")
    return backend


def init_app(app: Flask) -> None:
    backend = make_storage(app)
    if isinstance(backend, storage.MovingWindowSupport):
        limiter: strategies.RateLimiter = strategies.MovingWindowRateLimiter(backend)
    else:
        limiter = strategies.FixedWindowRateLimiter(backend)
    app.extensions[EXTENSION_KEY] = (backend, limiter)


def _counted(fn: Callable[P, R]) -> Callable[P, R]:
    """The storage's failures become `ThrottleUnavailable` (a clear 503), never a 500 nor an uncounted check."""

    @wraps(fn)
    def inner(*args: P.args, **kwargs: P.kwargs) -> R:
        try:
            return fn(*args, **kwargs)
        except StorageError as err:
            raise ThrottleUnavailable() from err

    return inner


def _limiter() -> strategies.RateLimiter:
    return current_app.extensions[EXTENSION_KEY][1]


def store_reachable() -> bool:
    """Whether the counters' storage answers now (readiness)."""
    try:
        return bool(current_app.extensions[EXTENSION_KEY][0].check())
    except Exception:  # noqa: BLE001 - any failure of a storage's own health check means "not reachable"
        return False


def store_name() -> str:
    """What kind of store keeps the counters (readiness), never its URI (it may carry a password)."""
    backend = current_app.extensions[EXTENSION_KEY][0]
    return DATABASE_STORE if isinstance(backend, DatabaseStorage) else type(backend).__name__


def _limit() -> RateLimitItemPerSecond:
    config = current_app.config
    return RateLimitItemPerSecond(
        max(1, int(config["LOGIN_MAX_FAILURES"])), max(1, int(config["LOGIN_FAILURE_WINDOW_SECONDS"]))
    )


def _key(email: str, remote_addr: str | None) -> str:
    return hashlib.sha256(f"{email}\n{remote_addr or '-'}".encode()).hexdigest()[:40]


@_counted
def take_attempt(email: str, remote_addr: str | None) -> int | None:
    """Count this pair's attempt *before* its password is checked; None when it may go on, else the seconds until it
    may try again (nothing is counted then).

    The attempt holds a place in the window until it turns out right (`clear`), so guesses sent at once through
    several processes are checked at most `LOGIN_MAX_FAILURES` times in all, never more.
    """
    limit, key = _limit(), _key(email, remote_addr)
    if _limiter().hit(limit, "login", key):
        return None
    reset_at = _limiter().get_window_stats(limit, "login", key).reset_time
    return max(1, math.ceil(reset_at - time.time()))


@_counted
def clear(email: str, remote_addr: str | None) -> None:
    _limiter().clear(_limit(), "login", _key(email, remote_addr))


def _address_limit() -> RateLimitItemPerSecond:
    config = current_app.config
    return RateLimitItemPerSecond(
        max(1, int(config["AUTH_ADDRESS_MAX_FAILURES"])), max(1, int(config["AUTH_ADDRESS_WINDOW_SECONDS"]))
    )


def _address_key(remote_addr: str | None) -> str:
    return hashlib.sha256(f"address\n{remote_addr or '-'}".encode()).hexdigest()[:40]


@_counted
def address_retry_after(remote_addr: str | None) -> int | None:
    """Seconds until this client address may try to authenticate again, or None when it may try now."""
    limit, key = _address_limit(), _address_key(remote_addr)
    if _limiter().test(limit, "auth-address", key):
        return None
    reset_at = _limiter().get_window_stats(limit, "auth-address", key).reset_time
    return max(1, math.ceil(reset_at - time.time()))


@_counted
def record_address_failure(remote_addr: str | None) -> None:
    """One failed authentication of any kind from this address."""
    _limiter().hit(_address_limit(), "auth-address", _address_key(remote_addr))


def _registration_limit() -> RateLimitItemPerSecond:
    config = current_app.config
    return RateLimitItemPerSecond(
        max(1, int(config["OAUTH_REGISTRATIONS_PER_ADDRESS"])),
        max(1, int(config["OAUTH_REGISTRATION_WINDOW_SECONDS"])),
    )


@_counted
def take_registration(remote_addr: str | None) -> int | None:
    """Count one open dynamic client registration (`/register`) from this address before anything is written;
    None when it may go on, else the seconds until the address may register again (nothing is counted then)."""
    limit, key = (
        _registration_limit(),
        hashlib.sha256(f"register\n{remote_addr or '-'}".encode()).hexdigest()[:40],
    )
    if _limiter().hit(limit, "oauth-register", key):
        return None
    reset_at = _limiter().get_window_stats(limit, "oauth-register", key).reset_time
    return max(1, math.ceil(reset_at - time.time()))


def reset() -> None:
    """Forget every counter (tests)."""
    current_app.extensions[EXTENSION_KEY][0].reset()
