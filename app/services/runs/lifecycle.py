"""Ending runs: completion with its bounded log, failure, closing by hand, recovery of abandoned runs.

Every path that ends a run goes through `_end`: the run's end is recorded, its wake finished, and the oldest wake
waiting behind it on the task becomes the next run. `_end` locks the run, then the agent (the order the task update
takes), so a wake recorded meanwhile (`request_wakeup` holds the same agent lock) is seen by one side or the other.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from flask import current_app, has_app_context
from sqlalchemy import func, select, update
from sqlalchemy.orm import joinedload

from app.adapters import AdapterResult
from app.core.errors import NotFound
from app.extensions import db
from app.models import ActivityLog, Agent, HeartbeatRun, Issue, WakeupRequest
from app.models.base import as_utc, utcnow
from app.models.run_logs import RUN_LOG_LIMIT, RunLog
from app.models.runs import ACTIVE_RUN_STATUSES
from app.services.activity import record_activity
from app.services.runs.sessions import _record_session
from app.services.runs.wake_context import TURN_KEY
from app.services.runs.wakeups import _is_postgres, _lock_agent, _record_run_activity, start_next_wake

# --- completion --------------------------------------------------------------------------------------------------


def _tail(text: str) -> str:
    return text[-RUN_LOG_LIMIT:] if len(text) > RUN_LOG_LIMIT else text


def complete_run(run: HeartbeatRun, result: AdapterResult) -> HeartbeatRun:
    """Record a finished turn (log, session) and start the next waiting wake of the agent on the task."""
    turn = (run.context_snapshot or {}).get(TURN_KEY) or {}
    snapshot = turn.get("connectionInstructions")
    digest = snapshot.get("digest") if isinstance(snapshot, dict) else None
    resumed = turn.get("resumeSessionId")
    _lock_ending(run)
    agent = db.session.get(Agent, run.agent_id)
    log = db.session.get(RunLog, run.id) or RunLog(run_id=run.id, company_id=run.company_id)
    log.adapter_type = agent.adapter_type if agent is not None else "unknown"
    log.exit_code = result.exit_code
    log.http_status = result.http_status
    log.stdout = _tail(result.stdout)
    log.stderr = _tail(result.stderr)
    log.truncated = (
        result.truncated or len(result.stdout) > RUN_LOG_LIMIT or len(result.stderr) > RUN_LOG_LIMIT
    )
    log.timed_out = result.timed_out
    log.resumed_session_id = resumed
    log.session_id = result.session_id
    log.instructions_digest = digest
    log.events = result.events or None
    log.summary = result.summary
    db.session.add(log)
    _record_session(run, result, digest, resumed)
    return _end(
        run, "succeeded" if result.ok else "failed", None if result.ok else result.error or "The run failed."
    )


# A run still `running` this long after its adapter timeout was abandoned by a worker that died mid-turn (the
# `RUN_ABANDONED_GRACE_SECONDS` setting overrides it).
ABANDONED_GRACE_SECONDS = 300
ABANDONED_MESSAGE = "The worker stopped while this run was in progress."
RECOVERED_ACTION = "run.recovered"
# How often one run may be handed back after losing its worker: a turn that kills its worker every time fails then.
MAX_RECOVERIES = 1
# The longest a turn may take when its agent configures no timeout (the process adapter's default).
DEFAULT_TURN_SECONDS = 600


def _abandoned_grace() -> float:
    if has_app_context():
        return float(current_app.config.get("RUN_ABANDONED_GRACE_SECONDS", ABANDONED_GRACE_SECONDS))
    return ABANDONED_GRACE_SECONDS


def recover_abandoned_runs(now: datetime | None = None) -> int:
    """Hand back runs whose worker died mid-turn (SIGKILL, a lost machine), so their wake runs again on another
    worker: a card's continuation still reaches its agent. A run that lost its worker `MAX_RECOVERIES` times
    already is failed instead, so the agent's next wake on the task can start. Returns how many."""
    now = now or utcnow()
    grace = _abandoned_grace()
    query = (
        select(HeartbeatRun)
        .where(HeartbeatRun.status == "running", HeartbeatRun.started_at.is_not(None))
        # An assistant's session run has no worker: it stays open until its person disconnects the assistant.
        .where(HeartbeatRun.invocation_source != "assistant")
        .order_by(HeartbeatRun.started_at)
    )
    if _is_postgres():
        query = query.with_for_update(skip_locked=True)
    recovered = 0
    for run in db.session.scalars(query):
        agent = db.session.get(Agent, run.agent_id)
        config = agent.adapter_config if agent is not None else None
        try:
            turn_seconds = float((config or {}).get("timeoutSeconds") or DEFAULT_TURN_SECONDS)
        except (TypeError, ValueError, AttributeError):
            turn_seconds = DEFAULT_TURN_SECONDS
        started_at = as_utc(run.started_at)
        if started_at is None:  # the query excludes these; the column is nullable for queued runs
            continue
        if started_at + timedelta(seconds=turn_seconds + grace) >= now:
            continue
        if _recoveries(run) < MAX_RECOVERIES:
            record_activity(
                company_id=run.company_id,
                actor_type="system",
                actor_id="worker",
                action=RECOVERED_ACTION,
                entity_type="heartbeat_run",
                entity_id=run.id,
                agent_id=run.agent_id,
                run_id=run.id,
                details={"reason": ABANDONED_MESSAGE},
            )
            requeue_run(run)
        else:
            fail_run(run, ABANDONED_MESSAGE)
        recovered += 1
    return recovered


def _recoveries(run: HeartbeatRun) -> int:
    return int(
        db.session.scalar(
            select(func.count())
            .select_from(ActivityLog)
            .where(ActivityLog.run_id == run.id, ActivityLog.action == RECOVERED_ACTION)
        )
        or 0
    )


def requeue_run(run: HeartbeatRun) -> HeartbeatRun:
    """Hand a running run back to the queue: its worker stopped before the turn ended (a graceful shutdown). The
    wake stays claimed by this run and the frozen turn stays on it, so the next worker runs the same wake again."""
    _lock_ending(run)
    if run.status == "running":
        run.status = "queued"
        run.started_at = None
        run.updated_at = utcnow()
        _record_run_activity(run, "run.requeued")
        db.session.flush()
    return run


def fail_run(run: HeartbeatRun, message: str) -> HeartbeatRun:
    """End a run that could not be executed (bad configuration, refused scope) without touching its session."""
    _lock_ending(run)
    return _end(run, "failed", message)


def close_run(run_id: uuid.UUID, status: str = "succeeded") -> HeartbeatRun:
    """End a queued or running run by hand (`switchboard runs close`); an ended run stays as it is."""
    run = db.session.get(HeartbeatRun, run_id)
    if run is None:
        raise NotFound("Heartbeat run not found")
    _lock_ending(run)
    if run.status in ACTIVE_RUN_STATUSES:
        _end(run, status, None)
    return run


def _lock_ending(run: HeartbeatRun) -> None:
    """Lock the run's row, then its agent's, and read the run's current state."""
    db.session.execute(select(HeartbeatRun.id).where(HeartbeatRun.id == run.id).with_for_update())
    _lock_agent(run.agent_id)
    db.session.refresh(run)


def _end(run: HeartbeatRun, status: str, error: str | None) -> HeartbeatRun:
    """Record the end (status, error, time, activity), finish the run's wake, start the next waiting wake."""
    run.status = status
    run.error = error[:2000] if error else None
    run.finished_at = utcnow()
    _record_run_activity(run, f"run.{status}")
    _finish_wake(run)
    db.session.flush()
    start_next_wake(run.agent_id, run.issue_id)
    return run


def _finish_wake(run: HeartbeatRun) -> None:
    # The wake stays `finished` whatever the run's outcome, so a connection-intent key keeps its single wake.
    db.session.execute(
        update(WakeupRequest)
        .where(WakeupRequest.run_id == run.id, WakeupRequest.status == "claimed")
        .values(status="finished", updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )


def run_log(run: HeartbeatRun) -> RunLog | None:
    return db.session.get(RunLog, run.id)


def recent_runs(issue: Issue, limit: int = 10) -> list[HeartbeatRun]:
    """The latest runs on a task, newest first, with their agents (the task page names them)."""
    return list(
        db.session.scalars(
            select(HeartbeatRun)
            .options(joinedload(HeartbeatRun.agent))
            .where(HeartbeatRun.issue_id == issue.id)
            .order_by(HeartbeatRun.created_at.desc())
            .limit(limit)
        )
    )
