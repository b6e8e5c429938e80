"""Graceful worker shutdown (issue 31 item 3): SIGTERM stops claiming, lets the turn finish, then hands it back.

`switchboard worker` calls `begin` on its first SIGTERM (or SIGINT):

1. The worker stops claiming: the loop's stop event is set, and `agent_turns.draining()` ends the run executor's
   pass before it claims another run.
2. The agent's turn in progress may finish within `WORKER_SHUTDOWN_GRACE_SECONDS`; its outcome is recorded as usual.
3. When the grace period has passed, every agent process group still running is killed (`agent_turns.end_turns`),
   and the run executor hands the run back (`lifecycle.requeue_run`): the run returns to `queued` with its wake
   still attached, so the next worker runs the same wake again, with the turn it had frozen (a card's continuation
   keeps its one wake instead of failing with it).
"""

from __future__ import annotations

import threading

from app.core import agent_turns
from app.workers.loop import stop_worker


def begin(stop: threading.Event, grace_seconds: float) -> threading.Timer:
    """Stop claiming now; end the turns still running after `grace_seconds`."""
    agent_turns.start_draining()
    stop_worker(stop)
    timer = threading.Timer(max(0.0, grace_seconds), agent_turns.end_turns)
    timer.daemon = True
    timer.start()
    return timer
