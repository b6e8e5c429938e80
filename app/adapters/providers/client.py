"""What the provider client keeps in one server process, in one object (`CLIENT`).

Calls to providers share, within a process: the event loop every exchange runs on (a daemon thread started on
first use, and again in a forked child), the pool of live MCP sessions on that loop (`session_pool`), each
provider's bulkhead counters and local breaker (`limits`), the calls in flight that an agent may cancel
(`call_control`), and the providers that said their tools changed (`mcp_client`). None of it is derived from the
database: the modules that use it take plain values (URLs, headers, timeouts, `Limits`) from their callers.

`close()` ends every pooled session on the loop (at exit, and between tests); `reset()` does that and forgets the
bulkhead and breaker counters, as a fresh process would start. After a fork the child finds the parent's loop and
pool belong to another process (`loop_pid`, `pool_loop`) and starts its own on first use.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import threading
from collections import OrderedDict
from typing import Any

import anyio

# A provider spamming notifications/tools/list_changed cannot grow the noted set without bound.
MAX_NOTED = 1024


class ProviderClient:
    """The per-process state of the provider client (see the module docstring)."""

    def __init__(self) -> None:
        # The event loop every provider exchange runs on, and the process that started it.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.loop_pid: int | None = None
        self.loop_lock = threading.Lock()
        # Pooled sessions (`session_pool.PooledSession` by `session_pool.Key`), touched only on `pool_loop`.
        self.pool: OrderedDict[Any, Any] = OrderedDict()
        self.pool_loop: asyncio.AbstractEventLoop | None = None
        # Bulkhead and local breaker state per provider key (`limits._State`).
        self.limits_lock = threading.Lock()
        self.limit_states: dict[str, Any] = {}
        # Calls an agent may cancel, by (run id, request key) (`call_control.CallControl`).
        self.in_flight_lock = threading.Lock()
        self.in_flight: dict[tuple[str, str], Any] = {}
        # Server URLs whose provider said its tools changed, until the gateway takes the note.
        self.tools_changed_lock = threading.Lock()
        self.tools_changed: set[str] = set()

    def event_loop(self) -> asyncio.AbstractEventLoop:
        """The process's provider event loop, started on first use (and again in a forked child)."""
        with self.loop_lock:
            if self.loop is None or self.loop_pid != os.getpid() or self.loop.is_closed():
                loop = asyncio.new_event_loop()
                threading.Thread(
                    target=loop.run_forever, name="switchboard-provider-loop", daemon=True
                ).start()
                self.loop, self.loop_pid = loop, os.getpid()
                # Close the pooled sessions while the loop still runs: providers see each session end (DELETE), and
                # the SDK's transports are not left for the garbage collector to finalize in another task at exit
                # ("Attempted to exit cancel scope in a different task").
                atexit.register(self.close)
            return self.loop

    def current_pool(self) -> OrderedDict[Any, Any]:
        """The pool of the running loop (called on it): a forked child's new loop does not own the parent's."""
        loop = asyncio.get_running_loop()
        if self.pool_loop is not loop:
            self.pool, self.pool_loop = OrderedDict(), loop
        return self.pool

    def close(self) -> None:
        """Close every provider session this process keeps open; the next call opens afresh."""
        loop = self.loop
        if loop is not None and self.loop_pid == os.getpid() and not loop.is_closed():
            asyncio.run_coroutine_threadsafe(self._close_pool(), loop).result()

    async def _close_pool(self) -> None:
        pool = self.current_pool()
        entries = list(pool.values())
        pool.clear()
        for entry in entries:
            entry.close()
        tasks = [entry.task for entry in entries if entry.task is not None]
        if tasks:
            with anyio.move_on_after(5):
                await asyncio.gather(*tasks, return_exceptions=True)

    def reset(self) -> None:
        """Close the sessions and forget every provider's bulkhead and breaker counters (tests)."""
        self.close()
        with self.limits_lock:
            self.limit_states.clear()

    def note_tools_changed(self, server_url: str) -> None:
        with self.tools_changed_lock:
            if len(self.tools_changed) < MAX_NOTED:
                self.tools_changed.add(server_url)

    def take_tools_changed(self, server_url: str) -> bool:
        """Whether the provider at this URL said its tools changed since the last take (and forget it)."""
        with self.tools_changed_lock:
            if server_url in self.tools_changed:
                self.tools_changed.discard(server_url)
                return True
            return False


CLIENT = ProviderClient()
