"""The agent turns a worker process is running, and their processes, so a shutdown can end them (issue 31 item 3).

The run executor runs each adapter turn inside `turn()`; the adapters report each agent process they start and
reap (`agent_started` / `agent_ended`), so the process groups to end are known without searching for them. A
worker's shutdown (`app/workers/shutdown.py`) sets `draining` (claim nothing more) and, once its grace period has
passed, `end_turns` kills every turn's agent process groups and marks those turns `ended_by_shutdown`, which the
executor reads to hand the run back instead of recording it as failed. State is process-wide: one worker process,
one shutdown. Nothing here reads Flask or the database.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

log = logging.getLogger(__name__)

_lock = threading.Lock()
_draining = threading.Event()
_turns: set[Turn] = set()
_current = threading.local()


@dataclass(eq=False)
class Turn:
    """One agent turn run by the executor: its live processes, and whether the shutdown ended it."""

    processes: set[subprocess.Popen[bytes]] = field(default_factory=set)
    ended_by_shutdown: bool = False


def draining() -> bool:
    """A shutdown has begun: claim nothing more."""
    return _draining.is_set()


@contextlib.contextmanager
def turn() -> Iterator[Turn]:
    """The executor runs one adapter turn inside this; adapters' processes started meanwhile belong to it."""
    current = Turn()
    with _lock:
        _turns.add(current)
    _current.turn = current
    try:
        yield current
    finally:
        _current.turn = None
        with _lock:
            _turns.discard(current)


def agent_started(proc: subprocess.Popen[bytes]) -> None:
    """An adapter started an agent process (the leader of its own process group) for the current turn."""
    current: Turn | None = getattr(_current, "turn", None)
    if current is None:
        return
    with _lock:
        current.processes.add(proc)
        ended = current.ended_by_shutdown
    if ended:  # started after the grace period: ended at once too
        _kill_group(proc)


def agent_ended(proc: subprocess.Popen[bytes]) -> None:
    current: Turn | None = getattr(_current, "turn", None)
    if current is not None:
        with _lock:
            current.processes.discard(proc)


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)


def end_turns() -> int:
    """The grace period is over: end every running turn's agent process groups; returns how many turns."""
    with _lock:
        turns = list(_turns)
        for current in turns:
            current.ended_by_shutdown = True
        processes = [proc for current in turns for proc in current.processes]
    for proc in processes:
        _kill_group(proc)
    if turns:
        log.warning(
            "worker shutdown: the grace period is over; %d agent turn(s) ended and handed back", len(turns)
        )
    return len(turns)


def start_draining() -> None:
    _draining.set()


def reset() -> None:
    """Back to serving (tests: one process runs many workers' lives)."""
    _draining.clear()
