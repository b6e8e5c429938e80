"""Wakes become heartbeat runs: one active run per agent and task, unique live intent wakes, claiming the next run."""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import select, update
from sqlalchemy.exc import IntegrityError

from app.adapters import EXECUTABLE_ADAPTERS
from app.core import metrics
from app.core.errors import Conflict, Unprocessable
from app.core.wake_signal import RUNS, signal_work
from app.extensions import db
from app.models import Agent, HeartbeatRun, Issue, WakeupRequest
from app.models.base import as_utc, rowcount, utcnow
from app.models.keys import CONNECTION_INTENT_KEY_PREFIX
from app.models.runs import ACTIVE_RUN_STATUSES
from app.services.activity import record_activity
from app.services.runs.wake_context import scrub_server_fields


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
    wake = _new_wake(agent, issue, source, reason, context, responsible_user_id, idempotency_key)
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


def _new_wake(
    agent: Agent,
    issue: Issue | None,
    source: str,
    reason: str,
    context: dict | None,
    responsible_user_id: uuid.UUID | None,
    idempotency_key: str | None,
) -> WakeupRequest:
    run_context = scrub_server_fields(context or {})
    if issue is not None:
        run_context.setdefault("issueId", str(issue.id))
        run_context.setdefault("taskId", str(issue.id))
    if responsible_user_id is None and issue is not None:
        responsible_user_id = issue.responsible_user_id
    return WakeupRequest(
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


@dataclass(frozen=True)
class WakeSpec:
    """One wake for `request_wakeups`: the arguments of `request_wakeup` (a task and a connection-intent key)."""

    agent: Agent
    issue: Issue
    source: str
    reason: str
    context: dict
    responsible_user_id: uuid.UUID | None
    idempotency_key: str


def request_wakeups(specs: list[WakeSpec]) -> dict[str, WakeupRequest | None]:
    """`request_wakeup` for many connection-intent wakes at once (a batch costs what one wake does).

    Returns each key's new wake, or None when a live wake with that key existed already. Agents are locked in id
    order (two batches never wait on each other in a cycle). Raises `WakeAlreadyExists` when the unique index refuses
    one of the inserts (a concurrent writer): nothing of the batch is kept, and the caller goes one wake at a time.
    """
    if not specs:
        return {}
    agent_ids = sorted({spec.agent.id for spec in specs})
    db.session.execute(select(Agent.id).where(Agent.id.in_(agent_ids)).order_by(Agent.id).with_for_update())
    keys = [spec.idempotency_key for spec in specs]
    live: set[str] = set(
        key
        for key in db.session.scalars(
            select(WakeupRequest.idempotency_key).where(
                WakeupRequest.company_id.in_({spec.agent.company_id for spec in specs}),
                WakeupRequest.idempotency_key.in_(keys),
                WakeupRequest.status.not_in(("skipped", "failed", "cancelled")),
            )
        )
        if key is not None
    )
    created: dict[str, WakeupRequest | None] = dict.fromkeys(live)
    wakes = []
    for spec in specs:
        if spec.idempotency_key in created:
            continue
        wake = _new_wake(
            spec.agent,
            spec.issue,
            spec.source,
            spec.reason,
            spec.context,
            spec.responsible_user_id,
            spec.idempotency_key,
        )
        created[spec.idempotency_key] = wake
        wakes.append(wake)
    if not wakes:
        return created
    try:
        with db.session.begin_nested():
            db.session.add_all(wakes)
            db.session.flush()
    except IntegrityError:
        raise WakeAlreadyExists(None) from None
    _start_next_wakes({(wake.agent_id, wake.issue_id) for wake in wakes})
    return created


def _start_next_wakes(pairs: set[tuple[uuid.UUID, uuid.UUID | None]]) -> None:
    """`start_next_wake` for many (agent, task) pairs with a task: two reads, one insert, one update."""
    agent_ids = {agent_id for agent_id, _ in pairs}
    issue_ids = {issue_id for _, issue_id in pairs if issue_id is not None}
    busy = {
        (row.agent_id, row.issue_id)
        for row in db.session.execute(
            select(HeartbeatRun.agent_id, HeartbeatRun.issue_id).where(
                HeartbeatRun.agent_id.in_(agent_ids),
                HeartbeatRun.issue_id.in_(issue_ids),
                HeartbeatRun.status.in_(ACTIVE_RUN_STATUSES),
            )
        )
    }
    oldest: dict[tuple[uuid.UUID, uuid.UUID | None], WakeupRequest] = {}
    for wake in db.session.scalars(
        select(WakeupRequest)
        .where(
            WakeupRequest.agent_id.in_(agent_ids),
            WakeupRequest.issue_id.in_(issue_ids),
            WakeupRequest.status == "queued",
        )
        .order_by(WakeupRequest.created_at, WakeupRequest.id)
    ):
        pair = (wake.agent_id, wake.issue_id)
        if pair in pairs and pair not in busy:
            oldest.setdefault(pair, wake)
    if not oldest:
        return
    runs = [(_run_for(wake), wake) for wake in oldest.values()]
    db.session.add_all([run for run, _ in runs])
    db.session.flush()
    for run, wake in runs:
        wake.status = "claimed"
        wake.run_id = run.id
    db.session.flush()
    signal_work(db.session, RUNS)


def _run_for(wake: WakeupRequest) -> HeartbeatRun:
    payload = wake.payload or {}
    responsible = payload.get("responsibleUserId")
    return HeartbeatRun(
        id=uuid.uuid4(),
        company_id=wake.company_id,
        agent_id=wake.agent_id,
        issue_id=wake.issue_id,
        responsible_user_id=uuid.UUID(responsible) if responsible else None,
        status="queued",
        invocation_source=wake.source,
        context_snapshot={**(payload.get("context") or {}), "wakeupRequestId": str(wake.id)},
    )


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
    run = _run_for(wake)
    db.session.add(run)
    db.session.flush()
    wake.status = "claimed"
    wake.run_id = run.id
    db.session.flush()
    signal_work(db.session, RUNS)  # a listening worker claims it as soon as this commits
    return run


def claim_next_run(run_id: uuid.UUID | None = None) -> HeartbeatRun | None:
    """Move the oldest queued run of an active agent with an executable adapter (or that one run) to `running`;
    None when nothing is due."""
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
    if run_id is not None:
        query = query.where(HeartbeatRun.id == run_id)
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
    if rowcount(claimed) != 1:
        return None
    db.session.refresh(candidate)
    _record_run_activity(candidate, "run.started")
    started, queued = as_utc(candidate.started_at), as_utc(candidate.created_at)
    if started is not None and queued is not None:
        continuation = bool((candidate.context_snapshot or {}).get("interactionId"))
        metrics.observe_wake(continuation, (started - queued).total_seconds())
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
