"""The PostgreSQL listener: one thread per worker process waits in `LISTEN switchboard_work` and nudges the workers.

Services send `NOTIFY switchboard_work, '<topic>'` from the transaction that queues work (`app/core/wake_signal.py`);
PostgreSQL delivers it at commit. The listener turns each notification into an in-process nudge for the workers of
that topic, so an idle worker starts within milliseconds instead of at its next poll. Polling stays the fallback:
when the listening connection breaks, the listener reconnects with back-off, and on every (re)connect it nudges all
workers once, because a notification sent while nobody listened is gone.
"""

from __future__ import annotations

import logging
import threading

import psycopg
from sqlalchemy.engine import URL

from app.core import wake_signal

log = logging.getLogger(__name__)

_RECEIVE_TIMEOUT = 5.0
_MAX_BACKOFF = 30.0


class Listener:
    """One LISTEN connection and its thread (see the module docstring)."""

    def __init__(self, url: URL):
        self.conninfo = url.set(drivername="postgresql").render_as_string(hide_password=False)
        self.listening = threading.Event()
        self.received = 0
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="switchboard-listener", daemon=True)

    def start(self) -> Listener:
        self.thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _run(self) -> None:
        backoff = 0.5
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.conninfo, autocommit=True) as conn:
                    conn.execute(f"LISTEN {wake_signal.CHANNEL}")
                    self.listening.set()
                    backoff = 0.5
                    wake_signal.nudge()  # whatever was signalled while nobody listened
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=_RECEIVE_TIMEOUT):
                            self.received += 1
                            if note.payload in wake_signal.TOPICS:
                                wake_signal.nudge(note.payload)
                            else:
                                wake_signal.nudge()
            except Exception:
                log.warning(
                    "the worker listener lost its connection; polling until it reconnects", exc_info=True
                )
            self.listening.clear()
            self._stop.wait(backoff)
            backoff = min(backoff * 2, _MAX_BACKOFF)


_listeners: dict[str, Listener] = {}
_lock = threading.Lock()


def ensure_listener(url: URL) -> Listener | None:
    """The process's listener for this database (started on first use); None unless it is PostgreSQL."""
    if not url.drivername.startswith("postgresql"):
        return None
    key = url.render_as_string(hide_password=True)
    with _lock:
        listener = _listeners.get(key)
        if listener is None or not listener.thread.is_alive():
            listener = _listeners[key] = Listener(url).start()
        return listener
