"""How much of the server one provider may take: a bulkhead and a circuit breaker, per provider, per process.

A call to a provider holds a request thread until the provider answers or the call timeout passes. Without a bound,
a few agents calling one frozen provider take every thread a server process has, and board pages and runtime tools
queue behind them. So:

- **Bulkhead.** Each provider gets at most `max_concurrent` calls in flight in this process; one more is refused at
  once (`Busy`), never queued.
- **Circuit breaker.** After `failure_threshold` consecutive timeouts the provider's breaker opens: calls are refused
  at once (`Paused`) for `reset_seconds`. Then exactly one trial call goes through (the others are still refused):
  an answer closes the breaker, another timeout opens it again for `reset_seconds`. Only timeouts count: a provider
  that answers quickly, even with an error, is not holding anyone's threads.

A provider is its MCP server address as `provider_key` writes it (scheme, host, port and path; never the query
string, which may carry an API key), so every connection to the same server shares one bulkhead and one breaker.

The state is the process's (`client.ProviderClient.limit_states`) and thread-safe: one lock, held only to read and update counters, never during a call.
Nothing here reads Flask or the database. The bulkhead is always this process's own (it bounds this process's
threads); the breaker is too unless `Limits.shared` hands it to a store every process sees
(`shared_breakers.DatabaseBreakers`, what gateway calls use), so timeouts count across processes and instances.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Protocol
from urllib.parse import urlsplit

from app.adapters.providers.client import CLIENT


class SharedBreakers(Protocol):
    """Breakers kept where every process sees them (`shared_breakers.DatabaseBreakers`)."""

    def admit(self, key: str, limits: Limits) -> tuple[bool, bool]:
        """(is this call the trial, has the provider any state), or raise `Paused`."""
        ...

    def settle(self, key: str, limits: Limits, *, timed_out: bool, trial: bool, seen: bool) -> None: ...


@dataclass(frozen=True)
class Limits:
    """The bounds for one call: how many may run at once, and when the breaker opens and for how long; `shared`,
    when given, keeps the breaker for every process (else it is this process's)."""

    max_concurrent: int = 4
    failure_threshold: int = 3
    reset_seconds: float = 30.0
    shared: SharedBreakers | None = None

    def __post_init__(self) -> None:
        if self.max_concurrent < 1 or self.failure_threshold < 1 or self.reset_seconds <= 0:
            raise ValueError("limits must be positive")


class Busy(Exception):
    """`limit` calls to this provider are already in flight in this process."""

    def __init__(self, limit: int):
        super().__init__(f"{limit} calls already in flight")
        self.limit = limit


class Paused(Exception):
    """The breaker is open after `timeouts` consecutive timeouts; the next trial is in `retry_after` seconds."""

    def __init__(self, timeouts: int, retry_after: float):
        super().__init__(f"paused after {timeouts} timeouts; retry in {retry_after:.0f} s")
        self.timeouts = timeouts
        self.retry_after = retry_after

    @property
    def retry_after_seconds(self) -> int:
        """Whole seconds, at least 1 (what a message or a Retry-After says)."""
        return max(1, math.ceil(self.retry_after))


@dataclass
class _State:
    active: int = 0
    timeouts: int = 0  # consecutive, reset by any answer
    open_until: float | None = None  # monotonic time; None while the breaker is closed
    trial_running: bool = False


class Call:
    """Handed to the body of `slot`: say `timed_out()` when the provider did not answer in time."""

    __slots__ = ("_timed_out",)

    def __init__(self) -> None:
        self._timed_out = False

    def timed_out(self) -> None:
        self._timed_out = True


def provider_key(server_url: str) -> str:
    """`scheme://host:port/path` of an MCP server URL, lowercased where URLs are case-insensitive."""
    parts = urlsplit(server_url)
    scheme = parts.scheme.lower()
    port = parts.port or {"http": 80, "https": 443}.get(scheme, 0)
    return f"{scheme}://{(parts.hostname or '').lower()}:{port}{parts.path or '/'}"


@contextmanager
def slot(key: str, limits: Limits) -> Iterator[Call]:
    """Run the body as one call to the provider `key`, or raise `Busy` / `Paused` at once.

    Any exit other than `Call.timed_out()` counts as an answer (the breaker closes); an exception the body raises
    passes through unchanged.
    """
    shared = limits.shared
    trial, seen = shared.admit(key, limits) if shared is not None else (False, False)
    with CLIENT.limits_lock:
        state = CLIENT.limit_states.setdefault(key, _State())
        now = time.monotonic()
        if shared is None and state.open_until is not None:
            if now < state.open_until or state.trial_running:
                raise Paused(state.timeouts, max(0.0, state.open_until - now))
            trial = True
        if state.active >= limits.max_concurrent:
            raise Busy(limits.max_concurrent)
        state.active += 1
        state.trial_running = state.trial_running or (trial and shared is None)
    call = Call()
    try:
        yield call
    finally:
        with CLIENT.limits_lock:
            state.active -= 1
            if shared is None:
                _settle(state, limits, call._timed_out, trial)
            if state.active == 0 and state.timeouts == 0 and state.open_until is None:
                CLIENT.limit_states.pop(key, None)
        if shared is not None:
            shared.settle(key, limits, timed_out=call._timed_out, trial=trial, seen=seen)


def _settle(state: _State, limits: Limits, timed_out: bool, trial: bool) -> None:
    """This process's breaker after a call (the lock held)."""
    if trial:
        state.trial_running = False
    if timed_out:
        state.timeouts += 1
        if trial or state.timeouts >= limits.failure_threshold:
            state.open_until = time.monotonic() + limits.reset_seconds
    else:
        state.timeouts = 0
        state.open_until = None


def in_flight(key: str) -> int:
    """Calls to the provider `key` running now in this process (for tests and diagnostics)."""
    with CLIENT.limits_lock:
        state: _State | None = CLIENT.limit_states.get(key)
        return state.active if state else 0
