"""What an agent's client can do to a provider call while it runs: hear its progress, and cancel it.

A `CallControl` is made by the caller (a request thread) and handed to `mcp_client.call_tool`, whose event loop
attaches its cancel scope to it. `cancel()` is thread-safe: another request thread (the agent's
`notifications/cancelled`) or a closed SSE response may call it at any time, before, during or after the call.
Cancelling the provider call makes the SDK client send the provider `notifications/cancelled`, exactly as our own
timeout does; the pooled provider session (`session_pool`) stays open for the next call (a timeout evicts it).

`in_flight` registers a call under its run and the agent's JSON-RPC request id, so a cancellation that arrives on
another request of the same run in the same server process finds it at once. One that lands in another process is
recorded in the database (`app.services.gateway.cancellation`), and the call's `watch` finds it there: the waiting
caller asks every `poll_seconds` (`CallControl.wait`).
"""

from __future__ import annotations

import concurrent.futures
import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from typing import Any, TypeVar

import anyio
import anyio.from_thread
import anyio.lowlevel

from app.adapters.providers.client import CLIENT
from app.adapters.providers.errors import ProviderError

T = TypeVar("T")
ProgressSink = Callable[[float, float | None, str | None], None]


class ProviderCancelled(ProviderError):
    """The agent cancelled the call before the provider answered (the provider was told)."""

    def __init__(self) -> None:
        super().__init__("The call was cancelled before the provider answered.")


class CallControl:
    """Progress sink and cancel switch of one provider call (see the module docstring).

    `watch`, when given, is asked every `poll_seconds` while the caller waits for the provider whether the call was
    cancelled somewhere this object cannot be reached from (another server process); True cancels it.
    """

    def __init__(
        self,
        on_progress: ProgressSink | None = None,
        *,
        watch: Callable[[], bool] | None = None,
        poll_seconds: float = 0.5,
    ):
        self.on_progress = on_progress
        self.watch = watch
        self.poll_seconds = poll_seconds
        self._lock = threading.Lock()
        self._cancelled = False
        self._scope: anyio.CancelScope | None = None
        self._token: Any = None

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def attach(self, scope: anyio.CancelScope) -> None:
        """Called inside the provider call's event loop: `cancel()` from now on cancels `scope`."""
        with self._lock:
            self._scope, self._token = scope, anyio.lowlevel.current_token()
            if self._cancelled:
                scope.cancel()

    def detach(self) -> None:
        with self._lock:
            self._scope = self._token = None

    def cancel(self) -> None:
        with self._lock:
            self._cancelled = True
            scope, token = self._scope, self._token
        if scope is None:
            return
        with suppress(RuntimeError):  # the loop ended meanwhile: the call is over, nothing to cancel
            anyio.from_thread.run_sync(scope.cancel, token=token)

    def wait(self, future: concurrent.futures.Future[T]) -> T:
        """The provider call's outcome, asking `watch` between waits until the call is cancelled or ends."""
        while True:
            if self.watch is None or self._cancelled:
                return future.result()
            try:
                return future.result(timeout=self.poll_seconds)
            except concurrent.futures.TimeoutError:
                if self.watch():
                    self.cancel()


def request_key(request_id: object) -> str:
    """A JSON-RPC request id as stored text: its JSON (`1` and `"1"` differ), hashed when longer than 200."""
    text = json.dumps(request_id)
    return text if len(text) <= 200 else "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def _key(run_id: object, request_id: object) -> tuple[str, str]:
    return str(run_id), request_key(request_id)


@contextmanager
def in_flight(run_id: object, request_id: object, control: CallControl) -> Iterator[CallControl]:
    """Make `control` findable by `cancel_in_flight` while the block runs."""
    key = _key(run_id, request_id)
    with CLIENT.in_flight_lock:
        CLIENT.in_flight[key] = control
    try:
        yield control
    finally:
        with CLIENT.in_flight_lock:
            if CLIENT.in_flight.get(key) is control:
                del CLIENT.in_flight[key]


def cancel_in_flight(run_id: object, request_id: object) -> bool:
    """Cancel the run's call with that request id if this process is running it; whether one was found."""
    with CLIENT.in_flight_lock:
        control = CLIENT.in_flight.get(_key(run_id, request_id))
    if control is None:
        return False
    control.cancel()
    return True
