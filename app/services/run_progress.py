"""What an agent's run did, told to people: the thread's live run entries, the Runs panel and the run page.

A run's own status says how its process ended; a person needs to know what it means for them. A run that stopped to
ask someone (it opened a card that is still waiting) "succeeded" as a process, yet the task is waiting for that person:
`RunProgress.phase` says so. The tool calls come from the gateway's activity rows of the run ("Builder used
honcho · list_workspaces", so a person sees what the agent did), the final message from the run's log; never
arguments, results or secrets.

Loading is batched (logs, tool calls, cards each read once for all the runs shown), so a long thread or Runs
panel costs no more round trips than a short one.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from sqlalchemy import ScalarSelect, func, select
from sqlalchemy.orm import joinedload

from app.extensions import db
from app.models import ActivityLog, HeartbeatRun, Issue, ThreadInteraction, User
from app.models.run_logs import RunLog
from app.models.runs import RunStatus
from app.services.activity import TOOL_CALL_ACTION

TOOL_CALLS_SHOWN = 8  # per run in the thread; the run page has the whole event log
FINAL_MESSAGE_SHOWN = 600

Phase = Literal["queued", "working", "waiting", "finished", "failed", "cancelled"]


@dataclass(frozen=True)
class ToolUse:
    connection: str | None
    tool: str
    outcome: str

    @property
    def failed(self) -> bool:
        return self.outcome not in ("ok",)


@dataclass(frozen=True)
class RunProgress:
    """One run as the thread shows it (`kind` tells the thread's template which partial to use)."""

    run: HeartbeatRun
    phase: Phase
    waiting_for: list[str] = field(default_factory=list)
    asked: list[str] = field(default_factory=list)  # people whose cards from this run were answered since
    tool_uses: list[ToolUse] = field(default_factory=list)
    tool_use_count: int = 0
    final_message: str | None = None
    kind: str = "run"

    @property
    def id(self) -> uuid.UUID:
        return self.run.id

    @property
    def created_at(self) -> datetime:
        return self.run.created_at

    @property
    def agent_name(self) -> str:
        return self.run.agent.name

    @property
    def headline(self) -> str:
        """The run in one sentence, as the thread and the Runs panel say it."""
        name = self.agent_name
        if self.phase == "queued":
            return f"{name} is about to start"
        if self.phase == "working":
            return f"{name} is working…"
        if self.phase == "waiting":
            return f"Waiting for {_names(self.waiting_for)}"
        if self.phase == "failed":
            return f"{name}'s run failed"
        if self.phase == "cancelled":
            return f"{name}'s run was cancelled"
        if self.asked:
            return f"{name} stopped to ask {_names(self.asked)}"
        return f"{name} finished"

    @property
    def label(self) -> str:
        """The short status badge: what `phase` means, not the process's exit."""
        return {
            "queued": "queued",
            "working": "working",
            "waiting": "waiting",
            "finished": "finished",
            "failed": "failed",
            "cancelled": "cancelled",
        }[self.phase]

    @property
    def hidden_tool_uses(self) -> int:
        return max(0, self.tool_use_count - len(self.tool_uses))


def _names(names: list[str]) -> str:
    if len(names) <= 1:
        return names[0] if names else "a person"
    return ", ".join(names[:-1]) + " and " + names[-1]


def _phase(run: HeartbeatRun, waiting_for: list[str]) -> Phase:
    if run.status == RunStatus.QUEUED:
        return "queued"
    if run.status == RunStatus.RUNNING:
        return "working"
    if run.status == RunStatus.FAILED:
        return "failed"
    if run.status == RunStatus.CANCELLED:
        return "cancelled"
    return "waiting" if waiting_for else "finished"


def progress_of(runs: list[HeartbeatRun]) -> list[RunProgress]:
    """Each run with what it did, read in batches for all `runs` at once (the runs' agents must be loaded)."""
    if not runs:
        return []
    ids = [run.id for run in runs]
    finals: dict[uuid.UUID, Any] = dict(
        db.session.execute(
            select(RunLog.run_id, RunLog.summary).where(RunLog.run_id.in_(ids), RunLog.summary.is_not(None))
        ).all()
    )
    ranked = (
        select(
            ActivityLog.run_id,
            ActivityLog.details,
            ActivityLog.created_at,
            func.row_number()
            .over(partition_by=ActivityLog.run_id, order_by=ActivityLog.created_at.desc())
            .label("rank"),
            func.count().over(partition_by=ActivityLog.run_id).label("total"),
        )
        .where(ActivityLog.run_id.in_(ids), ActivityLog.action == TOOL_CALL_ACTION)
        .subquery()
    )
    calls = db.session.execute(
        select(ranked.c.run_id, ranked.c.details, ranked.c.total)
        .where(ranked.c.rank <= TOOL_CALLS_SHOWN)
        .order_by(ranked.c.run_id, ranked.c.created_at)
    ).all()
    uses: dict[uuid.UUID, list[ToolUse]] = defaultdict(list)
    totals: dict[uuid.UUID, int] = {}
    for run_id, details, total in calls:
        totals[run_id] = int(total)
        uses[run_id].append(
            ToolUse(
                connection=(details or {}).get("connectionName"),
                tool=str((details or {}).get("toolName") or (details or {}).get("tool") or "a tool"),
                outcome=str((details or {}).get("outcome") or ""),
            )
        )
    waiting: dict[uuid.UUID, list[str]] = defaultdict(list)
    asked: dict[uuid.UUID, list[str]] = defaultdict(list)
    for run_id, status, name in db.session.execute(
        select(ThreadInteraction.source_run_id, ThreadInteraction.status, User.name)
        .outerjoin(User, User.id == ThreadInteraction.addressee_user_id)
        .where(ThreadInteraction.source_run_id.in_(ids))
        .order_by(ThreadInteraction.created_at)
    ).all():
        label = name or "a person"
        names = (waiting if status == "pending" else asked)[run_id] if run_id is not None else []
        if run_id is not None and label not in names:
            names.append(label)
    result = []
    for run in runs:
        summary = finals.get(run.id) or {}
        final = summary.get("finalMessage") if isinstance(summary, dict) else None
        result.append(
            RunProgress(
                run=run,
                phase=_phase(run, waiting.get(run.id, [])),
                waiting_for=waiting.get(run.id, []),
                asked=asked.get(run.id, []),
                tool_uses=uses.get(run.id, []),
                tool_use_count=totals.get(run.id, 0),
                final_message=str(final)[:FINAL_MESSAGE_SHOWN] if final else None,
            )
        )
    return result


def issue_runs(issue: Issue, limit: int) -> list[HeartbeatRun]:
    """The newest `limit` runs of a task, oldest first, with their agents."""
    newest = db.session.scalars(
        select(HeartbeatRun)
        .options(joinedload(HeartbeatRun.agent))
        .where(HeartbeatRun.issue_id == issue.id)
        .order_by(HeartbeatRun.created_at.desc())
        .limit(limit)
    ).all()
    return sorted(newest, key=lambda run: run.created_at)


def tool_calls_of_issue(issue: Issue) -> ScalarSelect[Any]:
    """How many gateway tool calls the task's runs made, for the thread's tag (an index on `activity_log.run_id`)."""
    return (
        select(func.count(ActivityLog.id))
        .where(
            ActivityLog.run_id.in_(select(HeartbeatRun.id).where(HeartbeatRun.issue_id == issue.id)),
            ActivityLog.action == TOOL_CALL_ACTION,
        )
        .scalar_subquery()
    )
