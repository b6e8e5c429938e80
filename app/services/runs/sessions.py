"""An agent's session per task, resumed only under the same connection-instruction digest."""

from __future__ import annotations

import uuid

from sqlalchemy import select

from app.adapters import AdapterResult
from app.extensions import db
from app.models import HeartbeatRun
from app.models.run_logs import AgentTaskSession

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
