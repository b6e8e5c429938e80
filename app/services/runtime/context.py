"""The live run behind a runtime token, re-validated on every use (company, agent, task, responsible person)."""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass

from sqlalchemy import Select, bindparam, select

from app.core.errors import Conflict, Forbidden, NotFound, Unprocessable
from app.extensions import db
from app.models import (
    AccessRevision,
    Agent,
    HeartbeatRun,
    Issue,
    Membership,
)
from app.services.access.revision import revision_column

# An assistant connected read-only (its choice, or its person is a viewer) says so in its session run's context
# snapshot (`services/assistants/grants`), which every gateway call loads anyway: the check costs no statement.
READ_ONLY_KEY = "assistantReadOnly"


def is_read_only(context_snapshot: dict | None) -> bool:
    return bool((context_snapshot or {}).get(READ_ONLY_KEY))


class RunRejected(Forbidden):
    """The token does not match a live run: clients must stop (kept as HTTP 403 even inside MCP tool calls)."""


@dataclass
class RunContext:
    run: HeartbeatRun
    agent: Agent
    issue: Issue
    responsible_user_id: uuid.UUID
    membership: Membership
    access_revision: int = 0  # the company's, read with the run (see `app.services.access.revision`)


def _uuid(value: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (TypeError, ValueError):
        return None


def _check_live_run(run: HeartbeatRun | None, claims: dict) -> HeartbeatRun:
    """The first steps of run validation: the token's run exists, matches its claims and is still running."""
    if (
        run is None
        or str(run.company_id) != claims.get("company_id")
        or str(run.agent_id) != claims.get("sub")
        or claims.get("responsible_user_id")
        not in {
            str(person) if person else ""
            for person in (run.responsible_user_id, run.handed_over_from_user_id)
        }
    ):
        raise RunRejected("Runtime tool token does not match its heartbeat run")
    if run.status != "running":
        raise RunRejected("Runtime tool token is no longer active")
    return run


def load_live_run(claims: dict) -> HeartbeatRun:
    """The live run of a token (`_check_live_run`), for calls that need no task context."""
    run_id = _uuid(claims.get("run_id"))
    return _check_live_run(db.session.get(HeartbeatRun, run_id) if run_id else None, claims)


def load_live_run_and_revision(claims: dict) -> tuple[HeartbeatRun, int, str | None]:
    """The live run of a token (`_check_live_run`), its company's access revision and its agent's adapter type
    (which names the gateway's tools, `gateway.names`), in one statement."""
    run_id = _uuid(claims.get("run_id"))
    row = None
    if run_id is not None:
        row = db.session.execute(
            select(HeartbeatRun, revision_column(), Agent.adapter_type)
            .outerjoin(AccessRevision, AccessRevision.company_id == HeartbeatRun.company_id)
            .outerjoin(Agent, Agent.id == HeartbeatRun.agent_id)
            .where(HeartbeatRun.id == run_id)
        ).first()
    run, revision, adapter_type = row if row is not None else (None, 0, None)
    return _check_live_run(run, claims), revision, adapter_type


@functools.cache
def _run_context_statement() -> Select:
    """The run, its task, its agent, the responsible person's membership and the access revision, for one
    `run_id` parameter: built once (building the statement cost as much CPU as running it)."""
    return (
        select(HeartbeatRun, Issue, Agent, Membership, revision_column())
        .outerjoin(Issue, Issue.id == HeartbeatRun.issue_id)
        .outerjoin(Agent, Agent.id == HeartbeatRun.agent_id)
        .outerjoin(
            Membership,
            (Membership.company_id == HeartbeatRun.company_id)
            & (Membership.user_id == HeartbeatRun.responsible_user_id),
        )
        .outerjoin(AccessRevision, AccessRevision.company_id == HeartbeatRun.company_id)
        .where(HeartbeatRun.id == bindparam("run_id"))
    )


def load_run_context(claims: dict) -> RunContext:
    """Full validation for a tool use, each step with its own status and message, in this order: the token's run
    exists, matches its claims and is running (`RunRejected`); the run has a responsible person (403); it is bound
    to a task (422); task and agent exist in the run's company (404); the responsible person still has write
    access (403); the agent still owns the task (409); the task is open (409). The first failing step answers.

    Every runtime call pays this, so the run, its task, its agent and the responsible person's membership come
    back in one statement; the checks then run in that order on what it returned.
    """
    run_id = _uuid(claims.get("run_id"))
    row = None
    if run_id is not None:
        row = db.session.execute(_run_context_statement(), {"run_id": run_id}).first()
    found_run, issue, agent, membership, revision = row if row is not None else (None, None, None, None, 0)
    run = _check_live_run(found_run, claims)
    if run.responsible_user_id is None:
        raise Forbidden("This task needs a responsible user to connect a service")
    if issue is None:
        # Runs opened before runs carried their task keep it in the context snapshot.
        snapshot = run.context_snapshot or {}
        issue_id = _uuid(snapshot.get("issueId")) or _uuid(snapshot.get("taskId"))
        if issue_id is None:
            raise Unprocessable("Connection requests require a task-bound heartbeat run")
        issue = db.session.get(Issue, issue_id)
    if (
        issue is None
        or agent is None
        or issue.company_id != run.company_id
        or agent.company_id != run.company_id
    ):
        raise NotFound("Runtime task or agent was not found")
    if membership is None or not (
        membership.has_write_access or (membership.status == "active" and is_read_only(run.context_snapshot))
    ):
        # A read-only assistant's person may be a viewer: the gateway refuses it every tool that writes.
        raise Forbidden("Responsible user is no longer authorized for company write access")
    if issue.assignee_agent_id != agent.id:
        raise Conflict("The requesting agent no longer owns this task")
    if issue.is_closed:
        raise Conflict("Connection requests cannot be created on a closed task")
    return RunContext(
        run=run,
        agent=agent,
        issue=issue,
        responsible_user_id=run.responsible_user_id,
        membership=membership,
        access_revision=revision,
    )
