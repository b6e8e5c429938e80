"""Wakeups become heartbeat runs; runs are claimed, completed and logged; agents keep a session per task.

- `request_wakeup` records a wake. At most one run per agent and task is active (queued or running): a wake that
  arrives while one is active waits (status `queued`) and becomes the next run when the active one ends. Wakes with
  a `connection-intent:` idempotency key are unique while live (a partial unique index); a duplicate raises
  `WakeAlreadyExists`, which callers treat as "already woken".
- `claim_next_run` moves the oldest queued run of an executable agent to `running` (`FOR UPDATE SKIP LOCKED` on
  PostgreSQL, plus a conditional update so no two workers ever start the same run).
- `complete_run` records the outcome, the bounded log (`RunLog`) and the agent's session for the task, then starts
  the next waiting wake.
- Sessions: `session_for_turn` resumes the stored session only when it was created under the same
  connection-instruction digest and the turn is not a continuation (`forceFreshSession`); otherwise a fresh session.
"""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from app.adapters import EXECUTABLE_ADAPTERS, AdapterResult
from app.core.errors import Conflict, Unprocessable
from app.extensions import db
from app.models import Agent, HeartbeatRun, Issue, WakeupRequest
from app.models.base import as_utc, utcnow
from app.models.run_logs import RUN_LOG_LIMIT, AgentTaskSession, RunLog
from app.models.runs import ACTIVE_RUN_STATUSES
from app.services.activity import record_activity
from app.services.run_context import TURN_KEY, scrub_server_fields

CONNECTION_INTENT_KEY_PREFIX = "connection-intent:"


class WakeAlreadyExists(Conflict):
    """A live wake with this idempotency key exists already (the database said so)."""

    def __init__(self, existing: WakeupRequest | None):
        super().__init__("A wake with this idempotency key already exists")
        self.existing = existing


def _is_postgres() -> bool:
    return db.session.get_bind().dialect.name == "postgresql"


def live_wake_for_key(company_id: uuid.UUID, key: str) -> WakeupRequest | None:
    return db.session.scalar(
        select(WakeupRequest)
        .where(
            WakeupRequest.company_id == company_id,
            WakeupRequest.idempotency_key == key,
            WakeupRequest.status.not_in(("skipped", "failed", "cancelled")),
        )
        .execution_options(populate_existing=True)
    )


def active_run(agent_id: uuid.UUID, issue_id: uuid.UUID | None) -> HeartbeatRun | None:
    return db.session.scalar(
        select(HeartbeatRun)
        .where(
            HeartbeatRun.agent_id == agent_id,
            HeartbeatRun.issue_id == issue_id if issue_id is not None else HeartbeatRun.issue_id.is_(None),
            HeartbeatRun.status.in_(ACTIVE_RUN_STATUSES),
        )
        .execution_options(populate_existing=True)
        .limit(1)
    )


def _lock_agent(agent_id: uuid.UUID) -> None:
    """Serialize wake bookkeeping per agent (PostgreSQL row lock; SQLite serializes writers itself)."""
    db.session.scalar(select(Agent.id).where(Agent.id == agent_id).with_for_update())


def request_wakeup(
    agent: Agent,
    *,
    issue: Issue | None = None,
    source: str = "manual",
    reason: str = "",
    context: dict | None = None,
    responsible_user_id: uuid.UUID | None = None,
    idempotency_key: str | None = None,
) -> WakeupRequest:
    """Record a wake of the agent (on the task) and start a run for it unless one is already active.

    The responsible person defaults to the task's. Caller-supplied server fields in `context` are dropped.
    Raises `WakeAlreadyExists` when a live wake with the same connection-intent key exists.
    """
    if issue is not None and issue.company_id != agent.company_id:
        raise Unprocessable("The agent and the task belong to different companies")
    _lock_agent(agent.id)
    if idempotency_key is not None and idempotency_key.startswith(CONNECTION_INTENT_KEY_PREFIX):
        existing = live_wake_for_key(agent.company_id, idempotency_key)
        if existing is not None:
            raise WakeAlreadyExists(existing)
    run_context = scrub_server_fields(context or {})
    if issue is not None:
        run_context.setdefault("issueId", str(issue.id))
        run_context.setdefault("taskId", str(issue.id))
    if responsible_user_id is None and issue is not None:
        responsible_user_id = issue.responsible_user_id
    wake = WakeupRequest(
        company_id=agent.company_id,
        agent_id=agent.id,
        issue_id=issue.id if issue is not None else None,
        source=source,
        reason=reason[:300],
        payload={
            "context": run_context,
            "responsibleUserId": str(responsible_user_id) if responsible_user_id else None,
        },
        idempotency_key=idempotency_key,
        status="queued",
    )
    try:
        with db.session.begin_nested():
            db.session.add(wake)
            db.session.flush()
    except IntegrityError:
        existing = live_wake_for_key(agent.company_id, idempotency_key) if idempotency_key else None
        if existing is None:
            raise
        raise WakeAlreadyExists(existing) from None
    start_next_wake(agent.id, wake.issue_id)
    return wake


def start_next_wake(agent_id: uuid.UUID, issue_id: uuid.UUID | None) -> HeartbeatRun | None:
    """Turn the oldest waiting wake of the agent on the task into a queued run, unless a run is active."""
    if active_run(agent_id, issue_id) is not None:
        return None
    wake = db.session.scalar(
        select(WakeupRequest)
        .where(
            WakeupRequest.agent_id == agent_id,
            WakeupRequest.issue_id == issue_id if issue_id is not None else WakeupRequest.issue_id.is_(None),
            WakeupRequest.status == "queued",
        )
        .order_by(WakeupRequest.created_at, WakeupRequest.id)
        .limit(1)
    )
    if wake is None:
        return None
    payload = wake.payload or {}
    responsible = payload.get("responsibleUserId")
    run = HeartbeatRun(
        company_id=wake.company_id,
        agent_id=agent_id,
        issue_id=issue_id,
        responsible_user_id=uuid.UUID(responsible) if responsible else None,
        status="queued",
        invocation_source=wake.source,
        context_snapshot={**(payload.get("context") or {}), "wakeupRequestId": str(wake.id)},
    )
    db.session.add(run)
    db.session.flush()
    wake.status = "claimed"
    wake.run_id = run.id
    db.session.flush()
    return run


def claim_next_run() -> HeartbeatRun | None:
    """Move the oldest queued run of an active process/HTTP agent to `running`; None when nothing is due."""
    query = (
        select(HeartbeatRun)
        .join(Agent, Agent.id == HeartbeatRun.agent_id)
        .where(
            HeartbeatRun.status == "queued",
            Agent.adapter_type.in_(EXECUTABLE_ADAPTERS),
            Agent.status == "active",
        )
        .order_by(HeartbeatRun.created_at, HeartbeatRun.id)
        .limit(1)
    )
    if _is_postgres():
        query = query.with_for_update(skip_locked=True, of=HeartbeatRun)
    candidate = db.session.scalar(query)
    if candidate is None:
        return None
    claimed = db.session.execute(
        update(HeartbeatRun)
        .where(HeartbeatRun.id == candidate.id, HeartbeatRun.status == "queued")
        .values(status="running", started_at=utcnow(), updated_at=utcnow())
        .execution_options(synchronize_session=False)
    )
    if claimed.rowcount != 1:
        return None
    db.session.refresh(candidate)
    _record_run_activity(candidate, "run.started")
    return candidate


def _record_run_activity(run: HeartbeatRun, action: str) -> None:
    context = run.context_snapshot or {}
    details = {"status": run.status, "source": run.invocation_source}
    for key in ("interactionId", "outcome"):
        if context.get(key):
            details[key] = context[key]
    record_activity(
        company_id=run.company_id,
        actor_type="system",
        actor_id="worker",
        action=action,
        entity_type="heartbeat_run",
        entity_id=run.id,
        agent_id=run.agent_id,
        run_id=run.id,
        details=details,
    )


# --- sessions ----------------------------------------------------------------------------------------------------


def task_session(agent_id: uuid.UUID, issue_id: uuid.UUID | None) -> AgentTaskSession | None:
    if issue_id is None:
        return None
    return db.session.scalar(
        select(AgentTaskSession).where(
            AgentTaskSession.agent_id == agent_id, AgentTaskSession.issue_id == issue_id
        )
    )


def session_for_turn(run: HeartbeatRun, digest: str | None, *, force_fresh: bool) -> str | None:
    """The session this turn resumes, or None for a fresh one (changed/removed snapshot, continuation, none yet)."""
    stored = task_session(run.agent_id, run.issue_id)
    if stored is None or not stored.session_id or force_fresh:
        return None
    return stored.session_id if stored.instructions_digest == digest else None


def _record_session(
    run: HeartbeatRun, result: AdapterResult, digest: str | None, resumed: str | None
) -> None:
    if run.issue_id is None:
        return
    stored = task_session(run.agent_id, run.issue_id)
    if stored is None:
        stored = AgentTaskSession(company_id=run.company_id, agent_id=run.agent_id, issue_id=run.issue_id)
        db.session.add(stored)
    if result.session_id:
        stored.session_id = result.session_id
        stored.instructions_digest = digest
    elif resumed is None:
        # A fresh turn that reported no session: the previous one is no longer compatible.
        stored.session_id = None
        stored.instructions_digest = digest
    stored.last_run_id = run.id


# --- completion --------------------------------------------------------------------------------------------------


def _tail(text: str) -> str:
    return text[-RUN_LOG_LIMIT:] if len(text) > RUN_LOG_LIMIT else text


def complete_run(run: HeartbeatRun, result: AdapterResult) -> HeartbeatRun:
    """Record a finished turn (log, session) and start the next waiting wake of the agent on the task."""
    turn = (run.context_snapshot or {}).get(TURN_KEY) or {}
    snapshot = turn.get("connectionInstructions")
    digest = snapshot.get("digest") if isinstance(snapshot, dict) else None
    resumed = turn.get("resumeSessionId")
    run.status = "succeeded" if result.ok else "failed"
    run.error = None if result.ok else (result.error or "The run failed.")[:2000]
    run.finished_at = utcnow()
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
    db.session.add(log)
    _record_session(run, result, digest, resumed)
    _record_run_activity(run, f"run.{run.status}")
    _finish_wake(run)
    db.session.flush()
    start_next_wake(run.agent_id, run.issue_id)
    return run


# A run still `running` this long after its adapter timeout was abandoned by a worker that died mid-turn.
ABANDONED_GRACE_SECONDS = 300
ABANDONED_MESSAGE = "The worker stopped while this run was in progress."
# The longest a turn may take when its agent configures no timeout (the process adapter's default).
DEFAULT_TURN_SECONDS = 600


def recover_abandoned_runs(now=None) -> int:
    """Fail runs whose worker died mid-turn, so the agent's next wake on the task can start. Returns how many."""
    now = now or utcnow()
    query = (
        select(HeartbeatRun)
        .where(HeartbeatRun.status == "running", HeartbeatRun.started_at.is_not(None))
        .order_by(HeartbeatRun.started_at)
    )
    if _is_postgres():
        query = query.with_for_update(skip_locked=True)
    recovered = 0
    for run in db.session.scalars(query):
        agent = db.session.get(Agent, run.agent_id)
        try:
            turn_seconds = float((agent.adapter_config or {}).get("timeoutSeconds") or DEFAULT_TURN_SECONDS)
        except (TypeError, ValueError, AttributeError):
            turn_seconds = DEFAULT_TURN_SECONDS
        if as_utc(run.started_at) + timedelta(seconds=turn_seconds + ABANDONED_GRACE_SECONDS) < now:
            fail_run(run, ABANDONED_MESSAGE)
            recovered += 1
    return recovered


def fail_run(run: HeartbeatRun, message: str) -> HeartbeatRun:
    """End a run that could not be executed (bad configuration, refused scope) without touching its session."""
    run.status = "failed"
    run.error = message[:2000]
    run.finished_at = utcnow()
    _record_run_activity(run, "run.failed")
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
    """The latest runs on a task, newest first (for the task page)."""
    return list(
        db.session.scalars(
            select(HeartbeatRun)
            .where(HeartbeatRun.issue_id == issue.id)
            .order_by(HeartbeatRun.created_at.desc())
            .limit(limit)
        )
    )
