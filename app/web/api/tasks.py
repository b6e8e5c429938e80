"""Board API for tasks: list, read, comment; read a comment or a heartbeat run."""

from __future__ import annotations

import uuid

from flask.typing import ResponseReturnValue
from pydantic import BaseModel, Field

from app.models import Comment, HeartbeatRun, Issue
from app.services.work import add_comment, list_issues
from app.web.api import bp
from app.web.api.validation import StrictBody, parse_body
from app.web.context import load_scoped, membership_for, parse_uuid, require_write
from app.web.openapi.operations import Answer, board_read, board_write
from app.web.openapi.responses import Moment, respond

# --- request and response models -------------------------------------------------------------------------------


class CommentBody(StrictBody):
    body: str = Field(min_length=1, max_length=20000)


class IssueResponse(BaseModel):
    id: uuid.UUID
    identifier: str
    title: str
    status: str
    description: str
    assigneeAgentId: uuid.UUID | None
    responsibleUserId: uuid.UUID | None

    @classmethod
    def of(cls, issue: Issue) -> IssueResponse:
        return cls(
            id=issue.id,
            identifier=issue.identifier,
            title=issue.title,
            status=issue.status,
            description=issue.description,
            assigneeAgentId=issue.assignee_agent_id,
            responsibleUserId=issue.responsible_user_id,
        )


class IssueListResponse(BaseModel):
    issues: list[IssueResponse]


class CommentCreatedResponse(BaseModel):
    id: uuid.UUID
    body: str


class CommentResponse(BaseModel):
    id: uuid.UUID
    issueId: uuid.UUID
    body: str
    authorUserId: uuid.UUID | None
    authorAgentId: uuid.UUID | None
    createdAt: Moment | None

    @classmethod
    def of(cls, comment: Comment) -> CommentResponse:
        return cls(
            id=comment.id,
            issueId=comment.issue_id,
            body=comment.body,
            authorUserId=comment.author_user_id,
            authorAgentId=comment.author_agent_id,
            createdAt=comment.created_at,
        )


class RunResponse(BaseModel):
    id: uuid.UUID
    companyId: uuid.UUID
    agentId: uuid.UUID
    issueId: uuid.UUID | None
    status: str
    invocationSource: str
    error: str | None
    contextSnapshotKeys: list[str]
    createdAt: Moment | None
    startedAt: Moment | None
    finishedAt: Moment | None

    @classmethod
    def of(cls, run: HeartbeatRun) -> RunResponse:
        return cls(
            id=run.id,
            companyId=run.company_id,
            agentId=run.agent_id,
            issueId=run.issue_id,
            status=run.status,
            invocationSource=run.invocation_source,
            error=run.error,
            # Only the snapshot's keys: its values are the run's own context, read by the agent through its tools.
            contextSnapshotKeys=sorted((run.context_snapshot or {}).keys()),
            createdAt=run.created_at,
            startedAt=run.started_at,
            finishedAt=run.finished_at,
        )


# --- routes ----------------------------------------------------------------------------------------------------


@bp.get("/companies/<company_id>/issues")
@board_read("List a company's tasks", "tasks", IssueListResponse)
def list_company_issues(company_id: str) -> ResponseReturnValue:
    membership = membership_for(parse_uuid(company_id))
    issues = list_issues(membership.company_id)
    return respond(IssueListResponse(issues=[IssueResponse.of(i) for i in issues]))


@bp.get("/issues/<issue_id>")
@board_read("Read a task", "tasks", IssueResponse)
def get_issue(issue_id: str) -> ResponseReturnValue:
    issue, _membership = load_scoped(Issue, issue_id)
    return respond(IssueResponse.of(issue))


@bp.post("/issues/<issue_id>/comments")
@board_write(
    "Comment on a task (wakes its assigned agent)",
    "tasks",
    CommentBody,
    {201: Answer("The comment was added", (CommentCreatedResponse,))},
)
def create_comment(issue_id: str) -> ResponseReturnValue:
    issue, membership = load_scoped(Issue, issue_id)
    require_write(membership)
    body = parse_body(CommentBody)
    comment = add_comment(issue, body.body, author_user_id=membership.user_id)
    return respond(CommentCreatedResponse(id=comment.id, body=comment.body), 201)


@bp.get("/comments/<comment_id>")
@board_read("Read a comment", "tasks", CommentResponse)
def get_comment(comment_id: str) -> ResponseReturnValue:
    comment, _membership = load_scoped(Comment, comment_id)
    return respond(CommentResponse.of(comment))


@bp.get("/runs/<run_id>")
@board_read("Read a heartbeat run", "tasks", RunResponse)
def get_run(run_id: str) -> ResponseReturnValue:
    run, _membership = load_scoped(HeartbeatRun, run_id)
    return respond(RunResponse.of(run))
