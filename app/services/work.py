"""Tasks and their threads: creating tasks, comments, status and assignee changes."""

from __future__ import annotations

import hashlib
import uuid
from dataclasses import dataclass
from typing import Any, Literal

from sqlalchemy import ColumnElement, ScalarSelect, case, func, select
from sqlalchemy.orm import joinedload

from app.adapters import EXECUTABLE_ADAPTERS
from app.core.errors import Unprocessable
from app.extensions import db
from app.models import Agent, Comment, HeartbeatRun, Issue, Membership, ThreadInteraction, WakeupRequest
from app.models.work import IssueStatus
from app.services.activity import record_activity
from app.services.intents.expiry import (
    continue_answered_cards,
    expire_intents_for_issue,
    supersede_intents_for_responsible_change,
)
from app.services.run_progress import RunProgress, issue_runs, progress_of, tool_calls_of_issue
from app.services.runs.wakeups import request_wakeup
from app.services.tenancy import allocate_issue_identifier, get_membership


def create_issue(
    company_id: uuid.UUID,
    *,
    title: str,
    description: str = "",
    project_id: uuid.UUID | None = None,
    status: str = "todo",
    assignee_agent_id: uuid.UUID | None = None,
    responsible_user_id: uuid.UUID | None = None,
) -> Issue:
    if status not in IssueStatus.values():
        raise Unprocessable("Unknown task status")
    issue = Issue(
        company_id=company_id,
        identifier=allocate_issue_identifier(company_id),
        title=title.strip(),
        description=description,
        project_id=project_id,
        status=status,
        assignee_agent_id=assignee_agent_id,
        responsible_user_id=responsible_user_id,
    )
    db.session.add(issue)
    db.session.flush()
    return issue


def list_issues(
    company_id: uuid.UUID, *, status: str | None = None, assignee_agent_id: uuid.UUID | None = None
) -> list[Issue]:
    """The company's tasks, newest first, each with its assignee's id and name (one statement: the list shows
    the assignee of every task, and loading each agent on its own cost a statement per agent)."""
    assignee = joinedload(Issue.assignee_agent).load_only(Agent.id, Agent.name)
    query = select(Issue).options(assignee).where(Issue.company_id == company_id)
    if status:
        query = query.where(Issue.status == status)
    if assignee_agent_id:
        query = query.where(Issue.assignee_agent_id == assignee_agent_id)
    return list(db.session.scalars(query.order_by(Issue.created_at.desc(), Issue.identifier.desc())))


THREAD_PAGE_SIZE = 30  # the newest items a task page shows; "Load earlier" adds this many more each time
THREAD_MAX_SHOWN = 5000


ThreadItem = Comment | ThreadInteraction | RunProgress


@dataclass(frozen=True)
class ThreadPage:
    """The newest `shown` items of a task's thread, oldest first, and how many earlier items are not shown."""

    items: list[ThreadItem]
    earlier: int
    shown: int

    @property
    def next_shown(self) -> int:
        """The window "Load earlier" asks for."""
        return min(self.shown + THREAD_PAGE_SIZE, THREAD_MAX_SHOWN)


def shown_count(raw: str | None) -> int:
    """The `shown` query parameter as a window size: a whole number from 1 to `THREAD_MAX_SHOWN`, else the default."""
    try:
        value = int(raw or THREAD_PAGE_SIZE)
    except ValueError:
        return THREAD_PAGE_SIZE
    return max(1, min(value, THREAD_MAX_SHOWN))


def thread_page(issue: Issue, shown: int = THREAD_PAGE_SIZE) -> ThreadPage:
    """The newest `shown` comments, cards and agent runs of a task, merged in creation order (a thread of
    hundreds of long comments is never sent whole; the agent's runs show in the thread as they happen)."""
    comments = db.session.scalars(
        select(Comment).where(Comment.issue_id == issue.id).order_by(Comment.created_at.desc()).limit(shown)
    ).all()
    interactions = db.session.scalars(
        select(ThreadInteraction)
        .where(ThreadInteraction.issue_id == issue.id)
        .order_by(ThreadInteraction.created_at.desc())
        .limit(shown)
    ).all()
    runs = issue_runs(issue, shown)
    merged: list[Comment | ThreadInteraction | HeartbeatRun] = [*comments, *interactions, *runs]
    newest = sorted(merged, key=lambda item: item.created_at)[-shown:]
    earlier = 0
    if max(len(comments), len(interactions), len(runs)) == shown or len(merged) > shown:
        total = db.session.execute(
            select(
                select(func.count(Comment.id)).where(Comment.issue_id == issue.id).scalar_subquery(),
                select(func.count(ThreadInteraction.id))
                .where(ThreadInteraction.issue_id == issue.id)
                .scalar_subquery(),
                select(func.count(HeartbeatRun.id))
                .where(HeartbeatRun.issue_id == issue.id)
                .scalar_subquery(),
            )
        ).one()
        earlier = sum(int(count or 0) for count in total) - len(newest)
    progress = {entry.id: entry for entry in progress_of([i for i in newest if isinstance(i, HeartbeatRun)])}
    items: list[ThreadItem] = [progress[i.id] if isinstance(i, HeartbeatRun) else i for i in newest]
    return ThreadPage(items, earlier, shown)


def thread_version(issue: Issue) -> str:
    """A tag that changes when a comment or a card arrives, a card is answered or expires, or one of the task's runs
    starts, calls a tool through the gateway or ends (one statement).

    A card's phase (its addressee opened the dialog) does not change it, so a poll never replaces a card in use.
    """

    def of_comments(column: ColumnElement[Any]) -> ScalarSelect[Any]:
        return select(column).where(Comment.issue_id == issue.id).scalar_subquery()

    def of_cards(column: ColumnElement[Any]) -> ScalarSelect[Any]:
        return select(column).where(ThreadInteraction.issue_id == issue.id).scalar_subquery()

    def of_runs(column: ColumnElement[Any]) -> ScalarSelect[Any]:
        return select(column).where(HeartbeatRun.issue_id == issue.id).scalar_subquery()

    row = db.session.execute(
        select(
            of_comments(func.count(Comment.id)),
            of_comments(func.max(Comment.created_at)),
            of_cards(func.count(ThreadInteraction.id)),
            of_cards(func.max(ThreadInteraction.created_at)),
            of_cards(func.max(ThreadInteraction.resolved_at)),
            of_cards(func.sum(case((ThreadInteraction.status == "pending", 1), else_=0))),
            of_runs(func.count(HeartbeatRun.id)),
            of_runs(func.max(HeartbeatRun.updated_at)),
            tool_calls_of_issue(issue),
            Issue.status,
            Issue.assignee_agent_id,
        ).where(Issue.id == issue.id)
    ).one()
    return _version_tag(tuple(row))


def _version_tag(values: tuple[Any, ...]) -> str:
    return hashlib.sha256(repr(tuple(str(v) for v in values)).encode()).hexdigest()[:16]


def add_comment(
    issue: Issue,
    body: str,
    *,
    author_user_id: uuid.UUID | None = None,
    author_agent_id: uuid.UUID | None = None,
    run_id: uuid.UUID | None = None,
) -> Comment:
    body = (body or "").strip()
    if not body:
        raise Unprocessable("Write a comment first.")
    if len(body) > 20000:
        raise Unprocessable("Comments are limited to 20,000 characters.")
    comment = Comment(
        company_id=issue.company_id,
        issue_id=issue.id,
        body=body,
        author_user_id=author_user_id,
        author_agent_id=author_agent_id,
    )
    db.session.add(comment)
    db.session.flush()
    if author_user_id is not None:
        wake_assignee(issue, source="comment", reason="A person commented on the task.")
    actor_type, actor_id = ("user", author_user_id) if author_user_id else ("agent", author_agent_id)
    if actor_id is None:  # the activity row names its actor (NOT NULL)
        raise ValueError("add_comment needs author_user_id or author_agent_id")
    record_activity(
        company_id=issue.company_id,
        actor_type=actor_type,
        actor_id=actor_id,
        action="issue.comment_added",
        entity_type="issue",
        entity_id=issue.id,
        agent_id=author_agent_id,
        run_id=run_id,
        details={"commentId": str(comment.id)},
    )
    return comment


def update_issue(
    actor: Membership,
    issue: Issue,
    *,
    status: str | None = None,
    assignee_agent_id: uuid.UUID | None | Literal["unchanged"] = "unchanged",
    responsible_user_id: uuid.UUID | None | Literal["unchanged"] = "unchanged",
) -> Issue:
    """Change status, assignee or responsible person; every referenced object must belong to the task's company."""
    changes: dict = {}
    if status is not None and status != issue.status:
        if status not in IssueStatus.values():
            raise Unprocessable("Unknown task status")
        changes["status"] = [issue.status, status]
        issue.status = status
    if assignee_agent_id != "unchanged" and assignee_agent_id != issue.assignee_agent_id:
        if assignee_agent_id is not None:
            agent = db.session.get(Agent, assignee_agent_id)
            if agent is None or agent.company_id != issue.company_id:
                raise Unprocessable("Choose an agent of this company")
        changes["assigneeAgentId"] = [_s(issue.assignee_agent_id), _s(assignee_agent_id)]
        issue.assignee_agent_id = assignee_agent_id
    if responsible_user_id != "unchanged" and responsible_user_id != issue.responsible_user_id:
        if responsible_user_id is not None:
            membership = get_membership(issue.company_id, responsible_user_id)
            if membership is None or not membership.has_write_access:
                raise Unprocessable("Choose an active member with write access")
        changes["responsibleUserId"] = [_s(issue.responsible_user_id), _s(responsible_user_id)]
        issue.responsible_user_id = responsible_user_id
    if {"status", "assigneeAgentId"} & changes.keys():
        # Closing or reassigning a task makes its pending connection cards moot.
        expire_intents_for_issue(issue)
    if "status" in changes:
        # Cards answered while the task waited (Todo, Blocked) continue once it is worked on.
        continue_answered_cards(issue)
    if "responsibleUserId" in changes:
        # Cards asked the previous person; the agent's next request asks the new one.
        supersede_intents_for_responsible_change(issue)
        hand_over_live_runs(issue)
    if "assigneeAgentId" in changes:
        wake_assignee(issue, source="assignment", reason="The task was assigned to you.")
    if changes:
        record_activity(
            company_id=issue.company_id,
            actor_type="user",
            actor_id=actor.user_id,
            action="issue.updated",
            entity_type="issue",
            entity_id=issue.id,
            details={"changes": changes},
        )
    return issue


def hand_over_live_runs(issue: Issue) -> None:
    """Runs of the task that are queued or running act for its new responsible person from their next call; their
    tokens, minted for the previous person, keep working (the run remembers whom they were minted for)."""
    runs = db.session.scalars(
        select(HeartbeatRun)
        .where(HeartbeatRun.issue_id == issue.id, HeartbeatRun.status.in_(("queued", "running")))
        .with_for_update()
    )
    for run in runs:
        if run.responsible_user_id != issue.responsible_user_id:
            if run.handed_over_from_user_id is None:
                run.handed_over_from_user_id = run.responsible_user_id
            run.responsible_user_id = issue.responsible_user_id
    new_person = str(issue.responsible_user_id) if issue.responsible_user_id else None
    for wake in db.session.scalars(
        select(WakeupRequest).where(WakeupRequest.issue_id == issue.id, WakeupRequest.status == "queued")
    ):
        wake.payload = {**(wake.payload or {}), "responsibleUserId": new_person}


def wake_assignee(issue: Issue, *, source: str, reason: str, context: dict | None = None) -> None:
    """Wake the task's agent (when it runs through an adapter and the task is open) to pick the task up."""
    if issue.assignee_agent_id is None or issue.is_closed:
        return
    agent = db.session.get(Agent, issue.assignee_agent_id)
    if agent is None or agent.adapter_type not in EXECUTABLE_ADAPTERS or agent.status != "active":
        return
    request_wakeup(agent, issue=issue, source=source, reason=reason, context=context)


def _s(value: object) -> str | None:
    return str(value) if value is not None else None
