"""The worker loop: deliver continuations and execute runs, in `switchboard worker` or a thread of the web process.

`run_worker_forever` runs the jobs whenever there is work; `start_in_process_worker` starts one daemon thread per job
so a long agent run never delays continuation delivery (used under `make run` when `RUN_WORKER_IN_PROCESS` is set).
A card resolution does not wait for the loop: the request delivers its continuation itself once it commits.

An idle worker waits for a wake signal (`app/core/wake_signal.py`): the transaction that queues work signals its
topic (a queued run, a continuation, a notification); on PostgreSQL a NOTIFY reaches every worker process through
its listener (`app/workers/listener.py`), and in-process workers are nudged after the commit on every backend. The
poll interval is only the fallback (a lost notification, a listener reconnecting, work that became due by time).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from flask import Flask

from app.core import wake_signal
from app.extensions import db
from app.workers.listener import ensure_listener

log = logging.getLogger(__name__)

JOBS = ("continuations", "runs", "notifications", "tools")  # notifications: issue 15 outbox; tools: issue 28
_loop_thread = threading.local()


def _job(name: str, wait: bool = True) -> Callable[[], int]:
    if name == "continuations":
        from app.workers.continuations import sweep_pending

        return lambda: sum(sweep_pending().values())
    if name == "runs":
        from app.workers.run_executor import execute_pending_runs

        return execute_pending_runs
    if name == "notifications":  # issue 15: the notification outbox (app/workers/outbox.py)
        from app.workers.outbox import dispatch_due
        from app.workers.outbox import sweep_pending as sweep_notifications

        if not wait:
            return (
                dispatch_due  # hands due rows to the delivery lanes and returns: never waits for a receiver
            )
        return lambda: sum(sweep_notifications().values())
    if name == "tools":  # issue 28: re-index connections whose provider said its tools changed
        from app.workers.tool_refresh import refresh_changed_connections

        return refresh_changed_connections
    raise ValueError(f"unknown worker job {name!r}")


def run_once(app: Flask, jobs: tuple[str, ...] = JOBS) -> int:
    """One pass over the jobs; returns how many units of work were done. In the long-running loop's thread
    notifications are handed to the delivery lanes and counted as started, not waited for."""
    wait = not getattr(_loop_thread, "active", False)
    done = 0
    with app.app_context():
        try:
            for name in jobs:
                try:
                    done += _job(name, wait)()
                except Exception:
                    db.session.rollback()
                    log.exception("worker job %s failed", name)
        finally:
            db.session.remove()
    return done


def run_worker_forever(
    app: Flask,
    poll_seconds: float = 2.0,
    *,
    jobs: tuple[str, ...] = JOBS,
    stop: threading.Event | None = None,
    listen: bool = True,
) -> None:
    """Run the jobs until `stop` is set; idle, wait for a wake signal or `poll_seconds` (`stop_worker` ends the wait).

    `listen=False` leaves out the PostgreSQL listener (the in-process signal and the poll remain).
    """
    stop = stop or threading.Event()
    _loop_thread.active = True  # run_once in this thread: notifications never wait for a receiver
    if listen:
        with app.app_context():
            ensure_listener(db.engine.url)
    while not stop.is_set():
        seen = wake_signal.generation(jobs)  # read first: a signal during the pass is not lost
        if run_once(app, jobs):
            continue
        wake_signal.wait_for(jobs, seen, poll_seconds)


def notify_worker() -> None:
    """Ask in-process workers to look for work now instead of at the next poll (after a commit that queued some)."""
    wake_signal.nudge()


def stop_worker(stop: threading.Event) -> None:
    """Set `stop` and wake the idle workers so they see it now."""
    stop.set()
    wake_signal.nudge()


def start_in_process_worker(app: Flask, poll_seconds: float = 2.0) -> list[threading.Thread]:
    """Start the worker threads once per app (daemon threads: they end with the process)."""
    existing = app.extensions.get("switchboard_worker")
    if existing:
        return existing
    threads = [
        threading.Thread(
            target=run_worker_forever,
            args=(app, poll_seconds),
            kwargs={"jobs": (name,)},
            name=f"switchboard-worker-{name}",
            daemon=True,
        )
        for name in JOBS
    ]
    app.extensions["switchboard_worker"] = threads
    for thread in threads:
        thread.start()
    return threads
