"""An agent's `notifications/cancelled` reaches its gateway call in whichever server process runs it.

A call in flight is registered in its own process (`call_control.in_flight`); a cancellation that lands there
cancels it at once. Gunicorn runs several processes, and a cancellation may land in another one: then it is written to
`gateway_cancellations` (run, request id), committed with the notification's 202, and the call's process finds it
by polling while it waits for the provider (`watcher`, asked every `GATEWAY_CANCEL_POLL_SECONDS`, 0.5 s by default:
one indexed read of a small table on a connection borrowed from the pool and returned at once, so no connection is
held while the provider works). Polling works the same on PostgreSQL and SQLite, with no listener to keep alive.

A row only counts for a call that started before it was written (less `SLACK`): an agent that reuses a request id
later in the same run (a new client session counts from 1 again) is not cancelled by an old row. Rows older than
`RETENTION` are deleted whenever a new one is written.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from flask import current_app
from sqlalchemy import delete, select
from sqlalchemy.exc import SQLAlchemyError

from app.adapters.providers import call_control
from app.extensions import db
from app.models import GatewayCancellation

logger = logging.getLogger(__name__)

RETENTION = timedelta(hours=1)
SLACK = timedelta(seconds=5)
DEFAULT_POLL_SECONDS = 0.5


def request_cancel(run_id: uuid.UUID, request_id: object) -> None:
    """Cancel the run's call with that request id: here if this process runs it, else for the process that does."""
    if request_id is None or isinstance(request_id, bool) or not isinstance(request_id, str | int):
        return  # not a request id (JSON-RPC ids are strings or integers): nothing to cancel
    if call_control.cancel_in_flight(run_id, request_id):
        return
    now = datetime.now(UTC)
    db.session.execute(delete(GatewayCancellation).where(GatewayCancellation.created_at < now - RETENTION))
    db.session.add(
        GatewayCancellation(run_id=run_id, request_key=call_control.request_key(request_id), created_at=now)
    )


def control_for(
    run_id: uuid.UUID, request_id: object, on_progress: call_control.ProgressSink | None = None
) -> call_control.CallControl:
    """The `CallControl` of a gateway call: progress to `on_progress`, cancellable from any server process."""
    return call_control.CallControl(
        on_progress,
        watch=watcher(run_id, request_id),
        poll_seconds=float(current_app.config.get("GATEWAY_CANCEL_POLL_SECONDS", DEFAULT_POLL_SECONDS)),
    )


def watcher(run_id: uuid.UUID, request_id: object) -> Callable[[], bool]:
    """Whether a cancellation of this call was recorded since it started (safe to call from any thread)."""
    engine = db.engine
    since = datetime.now(UTC) - SLACK

    def cancelled() -> bool:
        # Built when first asked: most calls end before the first poll, and building it costs a statement's CPU.
        query = (
            select(GatewayCancellation.id)
            .where(
                GatewayCancellation.run_id == run_id,
                GatewayCancellation.request_key == call_control.request_key(request_id),
                GatewayCancellation.created_at >= since,
            )
            .limit(1)
        )
        try:
            with engine.connect() as connection:
                return connection.execute(query).first() is not None
        except SQLAlchemyError:
            logger.warning("Could not look for a cancellation of a gateway call", exc_info=True)
            return False

    return cancelled
