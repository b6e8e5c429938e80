"""Execute queued heartbeat runs: claim one, prepare its invocation, hand it to the adapter, record the outcome.

Each step commits on its own: the claim (so no other worker takes the run), the prepared turn (its frozen snapshot and
session decision), and the completion. The adapter runs with no transaction open. A worker that is shutting down
claims no more runs, and a turn its grace period ended goes back to the queue (`app/workers/shutdown.py`).
"""

from __future__ import annotations

import logging
import uuid

from app.adapters import get_adapter
from app.core import agent_turns
from app.core.errors import ServiceError
from app.extensions import db
from app.models import Agent
from app.services.runs.invocation import prepare_invocation
from app.services.runs.lifecycle import complete_run, fail_run, recover_abandoned_runs, requeue_run
from app.services.runs.wakeups import claim_next_run

log = logging.getLogger(__name__)


def execute_next_run(run_id: uuid.UUID | None = None) -> bool:
    """Execute one queued run (or that one, when it is still queued); False when there was nothing to do. Call inside
    an app context."""
    run = claim_next_run(run_id)
    if run is None:
        db.session.rollback()
        return False
    db.session.commit()
    try:
        agent = db.session.get(Agent, run.agent_id)
        adapter = get_adapter(agent.adapter_type) if agent is not None else None
        if adapter is None:
            fail_run(run, "The agent has no executable adapter.")
            db.session.commit()
            return True
        invocation = prepare_invocation(run)
        db.session.commit()
    except ServiceError as exc:
        db.session.rollback()
        fail_run(run, exc.message)
        db.session.commit()
        return True
    with agent_turns.turn() as turn:
        try:
            result = adapter.execute(invocation)
        except Exception as exc:  # an adapter bug must not leave the run running forever
            if turn.ended_by_shutdown:
                result = None
            else:
                log.exception("adapter failed for run %s", invocation.run_id)
                db.session.rollback()
                fail_run(run, f"The adapter failed: {exc.__class__.__name__}")
                db.session.commit()
                return True
    db.session.rollback()  # nothing pending; refresh state from the database before writing the outcome
    if turn.ended_by_shutdown:
        # The worker is stopping and its grace period ended the turn: the run goes back to the queue with its wake.
        requeue_run(run)
    elif result is not None:
        complete_run(run, result)
    db.session.commit()
    return True


def execute_pending_runs(limit: int = 100) -> int:
    """Fail runs abandoned by a dead worker, then execute queued runs until none is due (at most `limit`)."""
    done = recover_abandoned_runs()
    db.session.commit()
    while done < limit and not agent_turns.draining() and execute_next_run():
        done += 1
    return done
