"""Tasks: the list with filters, the task page with its thread, comments, status and assignee changes."""

from collections.abc import Iterable
from typing import Any

from flask import redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from wtforms.fields.choices import SelectChoice

from app.core.errors import Unprocessable
from app.extensions import htmx
from app.models import Issue, Membership
from app.models.work import IssueStatus
from app.services.agents import AgentName, agent_names
from app.services.run_progress import progress_of
from app.services.runs.lifecycle import recent_runs
from app.services.tenancy import company_members
from app.services.work import (
    THREAD_PAGE_SIZE,
    add_comment,
    create_issue,
    list_issues,
    shown_count,
    thread_page,
    thread_version,
    update_issue,
)
from app.web.board import bp
from app.web.context import current_membership, load_scoped, parse_uuid, require_write
from app.web.forms import CommentForm, IssueAssigneeForm, IssueResponsibleForm, IssueStatusForm, NewIssueForm


def _assignee_form(issue: Issue, agents: Iterable[AgentName]) -> IssueAssigneeForm:
    form = IssueAssigneeForm(assignee=str(issue.assignee_agent_id or ""))
    form.assignee.choices = [SelectChoice("", "Unassigned")] + [
        SelectChoice(str(a.id), a.name) for a in agents
    ]
    return form


def _responsible_form(issue: Issue) -> IssueResponsibleForm:
    """People who can answer the task's cards: active members with write access."""
    form = IssueResponsibleForm(responsible=str(issue.responsible_user_id or ""))
    form.responsible.choices = [SelectChoice("", "Nobody")] + [
        SelectChoice(str(m.user_id), m.user.name)
        for m in company_members(issue.company_id)
        if m.has_write_access
    ]
    return form


def _thread_context(issue: Issue, version: str | None = None) -> dict:
    """What `board/_thread_items.html` shows: the newest items (`?shown=` widens the window: "Load earlier")."""
    page = thread_page(issue, shown_count(request.args.get("shown")))
    return {
        "issue": issue,
        "items": page.items,
        "thread": page,
        "default_shown": THREAD_PAGE_SIZE,
        "version": version or thread_version(issue),
    }


def _task_context(issue: Issue, membership: Membership, **extra: Any) -> dict:
    agents = agent_names(issue.company_id)
    return {
        **_thread_context(issue),
        "comment_form": extra.pop("comment_form", None) or CommentForm(formdata=None),
        "status_form": IssueStatusForm(formdata=None, status=issue.status),
        "assignee_form": _assignee_form(issue, agents),
        "responsible_form": _responsible_form(issue),
        "can_write": membership.has_write_access,
        **extra,
    }


@bp.get("/tasks")
def tasks() -> ResponseReturnValue:
    membership = current_membership()
    status = request.args.get("status") or None
    if status not in (None, *IssueStatus.values()):
        status = None
    assignee = request.args.get("assignee") or None
    agents = agent_names(membership.company_id)
    assignee_id = next((a.id for a in agents if str(a.id) == assignee), None)
    issues = list_issues(membership.company_id, status=status, assignee_agent_id=assignee_id)
    context = {
        "issues": issues,
        "agents": agents,
        "statuses": IssueStatus.values(),
        "status": status,
        "assignee": str(assignee_id) if assignee_id else None,
        "new_form": NewIssueForm(formdata=None),
    }
    if htmx and htmx.target == "task-list":
        return render_template("board/_task_list.html", **context)
    return render_template("board/tasks.html", **context)


@bp.post("/tasks")
def create_task() -> ResponseReturnValue:
    membership = current_membership()
    require_write(membership)
    form = NewIssueForm()
    if not form.validate_on_submit():
        agents = agent_names(membership.company_id)
        return render_template(
            "board/tasks.html",
            issues=list_issues(membership.company_id),
            agents=agents,
            statuses=IssueStatus.values(),
            status=None,
            assignee=None,
            new_form=form,
        ), 422
    issue = create_issue(
        membership.company_id,
        title=form.title.data,
        description=form.description.data or "",
        responsible_user_id=membership.user_id,
    )
    return redirect(url_for("board.task", issue_id=issue.id), code=303)


@bp.get("/tasks/<issue_id>")
def task(issue_id: str) -> ResponseReturnValue:
    issue, membership = load_scoped(Issue, issue_id)
    return render_template(
        "board/task.html", runs=progress_of(recent_runs(issue)), **_task_context(issue, membership)
    )


@bp.get("/tasks/<issue_id>/items")
def thread_items_fragment(issue_id: str) -> ResponseReturnValue:
    """The thread's items for the page's poller: 204 while nothing changed (a cheap tag, one statement)."""
    issue, _membership = load_scoped(Issue, issue_id)
    version = thread_version(issue)
    if request.args.get("v") == version:
        return "", 204
    items = render_template("board/_thread_items.html", **_thread_context(issue, version))
    # The Runs panel beside the thread follows the same change (a run that finished says so in both places).
    runs = render_template("board/_task_runs.html", runs=progress_of(recent_runs(issue)), oob=True)
    return items + runs


@bp.post("/tasks/<issue_id>/comments")
def post_comment(issue_id: str) -> ResponseReturnValue:
    issue, membership = load_scoped(Issue, issue_id)
    require_write(membership)
    form = CommentForm()
    if form.validate_on_submit():
        add_comment(issue, form.body.data, author_user_id=membership.user_id)
        if htmx:
            return render_template(
                "board/_thread.html", **_task_context(issue, membership), comment_posted=True
            )
        return redirect(url_for("board.task", issue_id=issue.id), code=303)
    context = _task_context(issue, membership, comment_form=form)
    if htmx:
        return render_template("board/_thread.html", **context), 422
    return render_template("board/task.html", **context), 422


@bp.post("/tasks/<issue_id>/status")
def change_status(issue_id: str) -> ResponseReturnValue:
    issue, membership = load_scoped(Issue, issue_id)
    require_write(membership)
    form = IssueStatusForm()
    if not form.validate_on_submit():
        raise Unprocessable("Choose a valid status")
    update_issue(membership, issue, status=form.status.data)
    return _task_fields_response(issue, membership)


@bp.post("/tasks/<issue_id>/assignee")
def change_assignee(issue_id: str) -> ResponseReturnValue:
    issue, membership = load_scoped(Issue, issue_id)
    require_write(membership)
    agents = agent_names(issue.company_id)
    form = _assignee_form(issue, agents)
    form.process(request.form)
    if not form.validate():
        raise Unprocessable("Choose an agent of this company")
    update_issue(
        membership, issue, assignee_agent_id=parse_uuid(form.assignee.data) if form.assignee.data else None
    )
    return _task_fields_response(issue, membership)


@bp.post("/tasks/<issue_id>/responsible")
def change_responsible(issue_id: str) -> ResponseReturnValue:
    """Hand the task to another person: cards that asked the previous one are superseded."""
    issue, membership = load_scoped(Issue, issue_id)
    require_write(membership)
    form = _responsible_form(issue)
    form.process(request.form)
    if not form.validate():
        raise Unprocessable("Choose an active member with write access")
    update_issue(
        membership,
        issue,
        responsible_user_id=parse_uuid(form.responsible.data) if form.responsible.data else None,
    )
    return _task_fields_response(issue, membership)


def _task_fields_response(issue: Issue, membership: Membership) -> ResponseReturnValue:
    if htmx:
        return render_template("board/_task_fields.html", **_task_context(issue, membership))
    return redirect(url_for("board.task", issue_id=issue.id), code=303)
