"""Board API for tasks: list, read, comment."""

from __future__ import annotations

from flask import jsonify
from pydantic import Field

from app.extensions import db
from app.models import Issue
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


class CommentBody(StrictBody):
    body: str = Field(min_length=1, max_length=20000)


@bp.get("/companies/<company_id>/issues")
def list_company_issues(company_id):
    membership = membership_for(parse_uuid(company_id))
    return jsonify({"issues": [issue_json(i) for i in list_issues(membership.company_id)]})


@bp.get("/issues/<issue_id>")
def get_issue(issue_id):
    issue, _membership = load_scoped(Issue, issue_id)
    return jsonify(issue_json(issue))


@bp.post("/issues/<issue_id>/comments")
def create_comment(issue_id):
    issue, membership = load_scoped(Issue, issue_id)
    require_write(membership)
    body = parse_body(CommentBody)
    comment = add_comment(issue, body.body, author_user_id=membership.user_id)
    db.session.commit()
    return jsonify({"id": str(comment.id), "body": comment.body}), 201
