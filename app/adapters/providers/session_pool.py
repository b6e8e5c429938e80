"""Live provider MCP sessions kept per worker process, so a gateway call costs one request, not a handshake.

A pooled session is keyed by (server URL, a digest of the credential headers, the outbound guard, the timeout, the
transport): two credentials never share a session (nor an HTTP connection: each session has its own
`httpx2.AsyncClient`, built by `mcp_client._Exchange`, so the guard's pinned transport and the headers are those of
that key). Each session is owned by one task on the process's provider loop (`mcp_client._on_loop`), which opens
the HTTP client, the MCP transport (Streamable HTTP, or HTTP+SSE: `transports`) and the `ClientSession`,
initializes once, and keeps them open until the session is evicted or has been idle for `IDLE_SECONDS`; callers
borrow it and send their requests through it concurrently (the SDK multiplexes requests by id).

Everything here runs on that one loop thread, so the pool needs no lock. At most `MAX_SESSIONS` are pooled; the
least recently used idle one is closed to make room, and when every pooled session is busy a call gets a session of
its own that is closed after it (`Lease.pooled` is False). `evict` closes a session at once (the caller saw a
transport or auth failure); `CLIENT.close()` empties the pool (tests, shutdown). The pool itself is the process's
(`client.ProviderClient.pool`).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
from collections import OrderedDict
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from typing import Any

import anyio
from mcp import ClientSession

from app.adapters.providers.client import CLIENT

IDLE_SECONDS = 60.0
MAX_SESSIONS = 32

Key = tuple[str, str, frozenset[str] | None, float, str]
# Opens the session's transport: an async context manager yielding its (read, write) streams.
OpenStreams = Callable[[], AbstractAsyncContextManager[tuple[Any, Any]]]


def key_for(
    server_url: str,
    headers: Mapping[str, str] | None,
    guard: frozenset[str] | None,
    timeout: float,
    transport: str = "mcp_remote",
) -> Key:
    """The pool key: the URL (which may carry a query credential) and a digest of the headers, never the headers."""
    canonical = json.dumps(sorted((k.lower(), v) for k, v in (headers or {}).items()))
    return server_url, hashlib.sha256(canonical.encode()).hexdigest(), guard, timeout, transport


class StatusHolder:
    """The first HTTP error status one exchange (an initialize, or one call) saw."""

    def __init__(self) -> None:
        self.status: int | None = None

    def record(self, status: int) -> None:
        if self.status is None:
            self.status = status


# The SDK transport handles a message in the sender's context (`ContextSendStream`), so the httpx response hook
# of a shared client can tell whose request an error status answered.
current_status: contextvars.ContextVar[StatusHolder | None] = contextvars.ContextVar(
    "provider_call_status", default=None
)


class PooledSession:
    """One live provider session, owned by the task running `serve`."""

    def __init__(
        self, key: Key, open_streams: OpenStreams, make_session: Callable[[Any, Any], ClientSession]
    ):
        self.key = key
        self._open_streams = open_streams
        self._make_session = make_session
        self.session: ClientSession | None = None
        self.error: BaseException | None = None  # why opening or initializing failed
        self.failure: BaseException | None = None  # why the session ended, if it did not end by `close`
        self.init_status = StatusHolder()
        self.ready = asyncio.Event()
        self.closing = asyncio.Event()
        self.closed = False
        self.in_use = 0
        self.uses = 0
        self.last_used = asyncio.get_running_loop().time()
        self.task: asyncio.Task[None] | None = None

    @property
    def alive(self) -> bool:
        return not self.closed and not self.closing.is_set()

    async def serve(self, timeout: float) -> None:
        current_status.set(self.init_status)
        try:
            async with (
                self._open_streams() as (read, write),
                self._make_session(read, write) as session,
            ):
                with anyio.fail_after(timeout):
                    await session.initialize()
                self.session = session
                self.ready.set()
                await self._wait_until_done()
        except BaseException as exc:  # noqa: BLE001 - kept for the callers; the task itself ends quietly
            self.failure = exc
            if self.error is None and self.session is None:
                self.error = exc
            if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                raise
        finally:
            self.closed = True
            self.ready.set()
            _forget(self)

    async def _wait_until_done(self) -> None:
        loop = asyncio.get_running_loop()
        while not self.closing.is_set():
            idle_for = loop.time() - self.last_used
            if self.in_use == 0 and idle_for >= IDLE_SECONDS:
                return
            with anyio.move_on_after(max(IDLE_SECONDS - idle_for, 1.0) if self.in_use == 0 else IDLE_SECONDS):
                await self.closing.wait()

    def close(self) -> None:
        self.closing.set()

    async def ended(self, patience: float) -> BaseException | None:
        """Wait (at most `patience` seconds) for the owner task to end; why it failed, if it did."""
        if self.task is not None and not self.task.done():
            await asyncio.wait({self.task}, timeout=patience)
        return self.failure


@dataclass
class Lease:
    entry: PooledSession
    reused: bool
    pooled: bool

    @property
    def session(self) -> ClientSession:
        assert self.entry.session is not None
        return self.entry.session


def _forget(entry: PooledSession) -> None:
    if CLIENT.pool.get(entry.key) is entry:
        del CLIENT.pool[entry.key]


def _make_room(pool: OrderedDict[Key, PooledSession]) -> bool:
    """Close idle sessions, least recently used first, until one more fits; False if every one is busy."""
    while len(pool) >= MAX_SESSIONS:
        idle = next((entry for entry in pool.values() if entry.in_use == 0), None)
        if idle is None:
            return False
        del pool[idle.key]
        idle.close()
    return True


async def acquire(
    key: Key,
    open_streams: OpenStreams,
    make_session: Callable[[Any, Any], ClientSession],
    *,
    fresh: bool = False,
) -> Lease:
    """Borrow the live session for `key` (opening and initializing one if needed); release it with `release`.

    Raises what opening or initializing the session raised (for the caller to translate). With `fresh`, the pooled
    session for `key` (if any) is evicted first.
    """
    pool = CLIENT.current_pool()
    entry = pool.get(key)
    if entry is not None and (fresh or not entry.alive):
        evict(entry)
        entry = None
    reused = entry is not None
    pooled = True
    if entry is None:
        pooled = _make_room(pool)
        entry = PooledSession(key, open_streams, make_session)
        if pooled:
            pool[key] = entry
        entry.task = asyncio.get_running_loop().create_task(entry.serve(key[3]))
    else:
        pool.move_to_end(key)
        reused = entry.ready.is_set()  # a session still being opened by another call is as good as fresh
    entry.in_use += 1
    try:
        await entry.ready.wait()
        if entry.session is None or entry.closed:
            raise entry.error or ConnectionError("the provider session closed")
    except BaseException:
        holder = current_status.get()
        if holder is not None and entry.init_status.status is not None:
            holder.record(entry.init_status.status)
        _release(entry, pooled)
        if not pooled:
            entry.close()
        raise
    return Lease(entry, reused, pooled)


def _release(entry: PooledSession, pooled: bool) -> None:
    entry.in_use -= 1
    entry.uses += 1
    entry.last_used = asyncio.get_running_loop().time()
    if not pooled and entry.in_use == 0:
        entry.close()


def release(lease: Lease, *, evict_session: bool = False) -> None:
    _release(lease.entry, lease.pooled)
    if evict_session:
        evict(lease.entry)


def evict(entry: PooledSession) -> None:
    """Drop `entry` from the pool and close it (calls still using it fail and are evicted in turn)."""
    _forget(entry)
    entry.close()


def pooled_count() -> int:
    return len(CLIENT.current_pool())
