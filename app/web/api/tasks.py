"""Board API for tasks: list, read, comment; read a comment or a heartbeat run."""

from __future__ import annotations

from datetime import datetime

from flask import jsonify
from flask.typing import ResponseReturnValue
from pydantic import Field

from app.models import Comment, HeartbeatRun, Issue
from app.models.base import as_utc
from app.services.work import add_comment, list_issues
from app.web.api import bp
from app.web.api.validation import StrictBody, parse_body
from app.web.context import load_scoped, membership_for, parse_uuid, require_write


def issue_json(issue: Issue) -> dict:
    return {
        "id": str(issue.id),
        "identifier": issue.identifier,
        "title": issue.title,
        "status": issue.status,
        "description": issue.description,
        "assigneeAgentId": str(issue.assignee_agent_id) if issue.assignee_agent_id else None,
        "responsibleUserId": str(issue.responsible_user_id) if issue.responsible_user_id else None,
    }


def _iso(value: datetime | None) -> str | None:
    return as_utc(value).isoformat() if value is not None else None


def _s(value: object) -> str | None:
    return str(value) if value is not None else None


def comment_json(comment: Comment) -> dict:
    return {
        "id": str(comment.id),
        "issueId": str(comment.issue_id),
        "body": comment.body,
        "authorUserId": _s(comment.author_user_id),
        "authorAgentId": _s(comment.author_agent_id),
        "createdAt": _iso(comment.created_at),
    }


def run_json(run: HeartbeatRun) -> dict:
    # Only the snapshot's keys: its values are the run's own context, read by the agent through its runtime tools.
    return {
        "id": str(run.id),
        "companyId": str(run.company_id),
        "agentId": str(run.agent_id),
        "issueId": _s(run.issue_id),
        "status": run.status,
        "invocationSource": run.invocation_source,
        "error": run.error,
        "contextSnapshotKeys": sorted((run.context_snapshot or {}).keys()),
        "createdAt": _iso(run.created_at),
        "startedAt": _iso(run.started_at),
        "finishedAt": _iso(run.finished_at),
    }


class CommentBody(StrictBody):
    body: str = Field(min_length=1, max_length=20000)


@bp.get("/companies/<company_id>/issues")
def list_company_issues(company_id: str) -> ResponseReturnValue:
    membership = membership_for(parse_uuid(company_id))
    return jsonify({"issues": [issue_json(i) for i in list_issues(membership.company_id)]})


@bp.get("/issues/<issue_id>")
def get_issue(issue_id: str) -> ResponseReturnValue:
    issue, _membership = load_scoped(Issue, issue_id)
    return jsonify(issue_json(issue))


@bp.post("/issues/<issue_id>/comments")
def create_comment(issue_id: str) -> ResponseReturnValue:
    issue, membership = load_scoped(Issue, issue_id)
    require_write(membership)
    body = parse_body(CommentBody)
    comment = add_comment(issue, body.body, author_user_id=membership.user_id)
    return jsonify({"id": str(comment.id), "body": comment.body}), 201


@bp.get("/comments/<comment_id>")
def get_comment(comment_id: str) -> ResponseReturnValue:
    comment, _membership = load_scoped(Comment, comment_id)
    return jsonify(comment_json(comment))


@bp.get("/runs/<run_id>")
def get_run(run_id: str) -> ResponseReturnValue:
    run, _membership = load_scoped(HeartbeatRun, run_id)
    return jsonify(run_json(run))
