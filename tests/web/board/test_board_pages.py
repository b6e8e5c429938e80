"""Board pages over real HTTP: task filters, the thread, htmx fragments, inline validation, escaping, the run page."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import func, select

from app.models import ActivityLog, Agent, Comment, HeartbeatRun, Issue
from tests.conftest import sign_in

HX = {"HX-Request": "true"}


@pytest.fixture
def board(make):
    company = make.company("Acme")
    user = make.member(company, "member")
    builder = make.agent(company, "Builder", instructions="Build things.")
    researcher = make.agent(company, "Researcher")
    tasks = {
        "build": make.issue(company, title="Build the arm", status="in_progress", assignee=builder),
        "research": make.issue(company, title="Research grippers", status="todo", assignee=researcher),
        "triage": make.issue(company, title="Triage bugs", status="todo"),
        "done": make.issue(company, title="Old release", status="done", assignee=builder),
    }
    return {"company": company, "user": user, "builder": builder, "researcher": researcher, **tasks}


def titles(html: str, board) -> set[str]:
    return {board[k].title for k in ("build", "research", "triage", "done") if board[k].title in html}


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ({}, {"build", "research", "triage", "done"}),
        ({"status": "todo"}, {"research", "triage"}),
        ({"status": "in_progress"}, {"build"}),
        ({"status": "blocked"}, set()),
        ({"status": "nonsense"}, {"build", "research", "triage", "done"}),
        ({"assignee": "builder"}, {"build", "done"}),
        ({"assignee": "researcher"}, {"research"}),
        ({"assignee": "builder", "status": "done"}, {"done"}),
        ({"assignee": "builder", "status": "todo"}, set()),
        ({"assignee": "not-an-id"}, {"build", "research", "triage", "done"}),
    ],
)
def test_tasks_list_filters_by_status_and_assignee(client, board, query, expected):
    sign_in(client, board["user"])
    if query.get("assignee") in ("builder", "researcher"):
        query = {**query, "assignee": str(board[query["assignee"]].id)}
    response = client.get("/tasks", query_string=query)
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "<html" in html
    assert titles(html, board) == {board[k].title for k in expected}
    if not expected:
        assert "No tasks match." in html


def test_filter_selects_stay_selected(client, board):
    sign_in(client, board["user"])
    html = client.get(
        "/tasks", query_string={"status": "todo", "assignee": str(board["researcher"].id)}
    ).get_data(as_text=True)
    assert '<option value="todo" selected>' in html
    assert f'<option value="{board["researcher"].id}" selected>' in html


def test_htmx_filter_returns_only_the_task_list_fragment(client, board):
    sign_in(client, board["user"])
    response = client.get("/tasks", query_string={"status": "todo"}, headers={**HX, "HX-Target": "task-list"})
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "<html" not in html
    assert html.lstrip().startswith('<div id="task-list"')
    assert titles(html, board) == {board["research"].title, board["triage"].title}
    assert "HX-Request" in response.headers.get("Vary", "")


def test_htmx_boosted_navigation_still_gets_the_full_page(client, board):
    sign_in(client, board["user"])
    response = client.get("/tasks", headers={**HX, "HX-Boosted": "true", "HX-Target": "main"})
    assert "<html" in response.get_data(as_text=True)
    assert "HX-Request" in response.headers.get("Vary", "")


def test_task_page_shows_the_thread_and_fields(client, make, board):
    make.comment(board["build"], board["user"], "First progress note")
    sign_in(client, board["user"])
    html = client.get(f"/tasks/{board['build'].id}").get_data(as_text=True)
    assert "Build the arm" in html
    assert "First progress note" in html
    assert 'id="thread"' in html and 'id="task-fields"' in html
    assert f'<option selected value="{board["builder"].id}">Builder</option>' in html


def comments(db, issue) -> list[str]:
    db.session.expire_all()
    return list(db.session.scalars(select(Comment.body).where(Comment.issue_id == issue.id)))


def test_htmx_comment_returns_the_thread_fragment(client, db, board):
    token = sign_in(client, board["user"])
    issue = board["build"]
    response = client.post(
        f"/tasks/{issue.id}/comments",
        data={"body": "  Halfway there  "},
        headers={**HX, "X-CSRFToken": token},
    )
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "<html" not in html
    assert html.lstrip().startswith('<div id="thread"')
    assert "Halfway there" in html
    # The form comes back empty, ready for the next comment.
    assert "Halfway there</textarea>" not in html
    assert "HX-Request" in response.headers.get("Vary", "")
    assert comments(db, issue) == ["Halfway there"]
    entry = db.session.scalar(select(ActivityLog).where(ActivityLog.action == "issue.comment_added"))
    assert entry.entity_id == str(issue.id)


def test_plain_comment_redirects_with_303(client, db, board):
    token = sign_in(client, board["user"])
    issue = board["build"]
    response = client.post(f"/tasks/{issue.id}/comments", data={"body": "No JS here", "csrf_token": token})
    assert response.status_code == 303
    assert response.headers["Location"] == f"/tasks/{issue.id}"
    assert comments(db, issue) == ["No JS here"]
    assert "No JS here" in client.get(response.headers["Location"]).get_data(as_text=True)


@pytest.mark.parametrize("htmx", [False, True], ids=["form", "htmx"])
@pytest.mark.parametrize(
    ("body", "error"),
    [("", "Write a comment first."), ("   ", "Write a comment first."), ("x" * 20001, "20000")],
    ids=["empty", "blank", "too-long"],
)
def test_invalid_comment_is_422_with_inline_error_and_the_form(client, db, board, htmx, body, error):
    token = sign_in(client, board["user"])
    issue = board["build"]
    headers = {**HX, "X-CSRFToken": token} if htmx else {}
    data = {"body": body} if htmx else {"body": body, "csrf_token": token}
    response = client.post(f"/tasks/{issue.id}/comments", data=data, headers=headers)
    assert response.status_code == 422
    html = response.get_data(as_text=True)
    assert ("<html" in html) is not htmx
    assert_described_error(html, "comment-body", error)
    if body.strip():
        assert body in html  # the draft is kept
    assert comments(db, issue) == []


def assert_described_error(html: str, field_id: str, message: str) -> None:
    """The field is marked invalid and points (aria-describedby) at an element that holds the message."""
    field = re.search(rf'<textarea[^>]*\bid="{field_id}"[^>]*>', html)
    assert field, f"no #{field_id} in the response"
    assert 'aria-invalid="true"' in field.group(0)
    described_by = re.search(r'aria-describedby="([^"]+)"', field.group(0)).group(1)
    error = re.search(
        rf'<small class="field-error" id="{re.escape(described_by)}" role="alert">([^<]*)</small>', html
    )
    assert error, f"aria-describedby={described_by!r} points at nothing"
    assert message in error.group(1)


def test_user_text_is_rendered_escaped(client, db, make, board):
    token = sign_in(client, board["user"])
    issue = make.issue(board["company"], title="<img src=x onerror=alert(1)> title")
    payload = "<script>alert('x')</script>"
    response = client.post(
        f"/tasks/{issue.id}/comments", data={"body": payload}, headers={**HX, "X-CSRFToken": token}
    )
    html = response.get_data(as_text=True)
    assert "<script>alert" not in html
    assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in html
    page = client.get(f"/tasks/{issue.id}").get_data(as_text=True)
    assert "<script>alert" not in page
    assert "&lt;script&gt;" in page
    assert "<img src=x" not in page
    assert "&lt;img src=x onerror=alert(1)&gt; title" in page
    listing = client.get("/tasks").get_data(as_text=True)
    assert "<img src=x" not in listing


def issue_updates(db, issue) -> list[dict]:
    db.session.expire_all()
    rows = db.session.scalars(
        select(ActivityLog).where(
            ActivityLog.action == "issue.updated", ActivityLog.entity_id == str(issue.id)
        )
    )
    return [row.details for row in rows]


def test_htmx_status_change_returns_fields_and_logs_activity(client, db, board):
    token = sign_in(client, board["user"])
    issue = board["research"]
    response = client.post(
        f"/tasks/{issue.id}/status", data={"status": "blocked"}, headers={**HX, "X-CSRFToken": token}
    )
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "<html" not in html
    assert html.lstrip().startswith('<div id="task-fields"')
    assert '<option selected value="blocked">' in html
    assert "HX-Request" in response.headers.get("Vary", "")
    db.session.expire_all()
    assert db.session.get(Issue, issue.id).status == "blocked"
    assert issue_updates(db, issue) == [{"changes": {"status": ["todo", "blocked"]}}]


def test_plain_status_change_redirects(client, db, board):
    token = sign_in(client, board["user"])
    issue = board["research"]
    response = client.post(f"/tasks/{issue.id}/status", data={"status": "done", "csrf_token": token})
    assert response.status_code == 303
    assert response.headers["Location"] == f"/tasks/{issue.id}"
    db.session.expire_all()
    assert db.session.get(Issue, issue.id).status == "done"


def test_unchanged_status_logs_nothing(client, db, board):
    token = sign_in(client, board["user"])
    issue = board["research"]
    response = client.post(
        f"/tasks/{issue.id}/status", data={"status": "todo"}, headers={**HX, "X-CSRFToken": token}
    )
    assert response.status_code == 200
    assert issue_updates(db, issue) == []


def test_unknown_status_is_422_and_changes_nothing(client, db, board):
    token = sign_in(client, board["user"])
    issue = board["research"]
    response = client.post(
        f"/tasks/{issue.id}/status", data={"status": "vanished"}, headers={**HX, "X-CSRFToken": token}
    )
    assert response.status_code == 422
    assert "<html" not in response.get_data(as_text=True)
    db.session.expire_all()
    assert db.session.get(Issue, issue.id).status == "todo"
    assert issue_updates(db, issue) == []


def test_htmx_assignee_change_returns_fields_and_logs_activity(client, db, board):
    token = sign_in(client, board["user"])
    issue = board["triage"]
    builder = board["builder"]
    response = client.post(
        f"/tasks/{issue.id}/assignee",
        data={"assignee": str(builder.id)},
        headers={**HX, "X-CSRFToken": token},
    )
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "<html" not in html
    assert html.lstrip().startswith('<div id="task-fields"')
    assert f'<option selected value="{builder.id}">Builder</option>' in html
    db.session.expire_all()
    assert db.session.get(Issue, issue.id).assignee_agent_id == builder.id
    assert issue_updates(db, issue) == [{"changes": {"assigneeAgentId": [None, str(builder.id)]}}]
    # And back to nobody.
    response = client.post(
        f"/tasks/{issue.id}/assignee", data={"assignee": ""}, headers={**HX, "X-CSRFToken": token}
    )
    assert response.status_code == 200
    db.session.expire_all()
    assert db.session.get(Issue, issue.id).assignee_agent_id is None
    assert len(issue_updates(db, issue)) == 2


def test_plain_assignee_change_redirects(client, db, board):
    token = sign_in(client, board["user"])
    issue = board["triage"]
    response = client.post(
        f"/tasks/{issue.id}/assignee", data={"assignee": str(board["researcher"].id), "csrf_token": token}
    )
    assert response.status_code == 303
    db.session.expire_all()
    assert db.session.get(Issue, issue.id).assignee_agent_id == board["researcher"].id


def test_new_task_is_created_and_redirects(client, db, board):
    token = sign_in(client, board["user"])
    response = client.post(
        "/tasks", data={"title": "Fresh task", "description": "Details", "csrf_token": token}
    )
    assert response.status_code == 303
    db.session.expire_all()
    issue = db.session.scalar(select(Issue).where(Issue.title == "Fresh task"))
    assert response.headers["Location"] == f"/tasks/{issue.id}"
    assert issue.responsible_user_id == board["user"].id
    assert issue.identifier.startswith(board["company"].issue_prefix + "-")


def test_new_task_without_title_is_422(client, db, board):
    token = sign_in(client, board["user"])
    before = db.session.scalar(select(func.count()).select_from(Issue))
    response = client.post("/tasks", data={"title": "", "description": "kept draft", "csrf_token": token})
    assert response.status_code == 422
    html = response.get_data(as_text=True)
    assert 'class="field-error"' in html
    assert "kept draft" in html
    db.session.expire_all()
    assert db.session.scalar(select(func.count()).select_from(Issue)) == before


def instructions(db, agent) -> str:
    db.session.expire_all()
    return db.session.get(Agent, agent.id).instructions


def test_agents_list_links_to_instructions(client, board):
    sign_in(client, board["user"])
    html = client.get("/agents").get_data(as_text=True)
    assert f"/agents/{board['builder'].id}/instructions" in html
    assert "Researcher" in html
    response = client.get(f"/agents/{board['builder'].id}")
    assert response.status_code == 302
    assert response.headers["Location"] == f"/agents/{board['builder'].id}/instructions"


def test_htmx_instructions_save_returns_the_fragment(client, db, board):
    token = sign_in(client, board["user"])
    agent = board["builder"]
    response = client.post(
        f"/agents/{agent.id}/instructions",
        data={"instructions": "  Ship small changes.  "},
        headers={**HX, "X-CSRFToken": token},
    )
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "<html" not in html
    assert html.lstrip().startswith('<div id="agent-instructions"')
    assert "Instructions saved." in html
    assert "Ship small changes." in html
    assert instructions(db, agent) == "Ship small changes."
    entry = db.session.scalar(select(ActivityLog).where(ActivityLog.action == "agent.updated"))
    assert entry.details == {"fields": ["instructions"], "length": len("Ship small changes.")}


def test_plain_instructions_save_redirects(client, db, board):
    token = sign_in(client, board["user"])
    agent = board["builder"]
    response = client.post(
        f"/agents/{agent.id}/instructions", data={"instructions": "Plain save", "csrf_token": token}
    )
    assert response.status_code == 303
    assert response.headers["Location"] == f"/agents/{agent.id}/instructions"
    assert instructions(db, agent) == "Plain save"
    assert "Plain save" in client.get(response.headers["Location"]).get_data(as_text=True)


def test_instructions_can_be_cleared(client, db, board):
    token = sign_in(client, board["user"])
    agent = board["builder"]
    response = client.post(f"/agents/{agent.id}/instructions", data={"instructions": "", "csrf_token": token})
    assert response.status_code == 303
    assert instructions(db, agent) == ""


@pytest.mark.parametrize("htmx", [False, True], ids=["form", "htmx"])
def test_over_long_instructions_are_422_and_keep_the_draft(client, db, board, htmx):
    token = sign_in(client, board["user"])
    agent = board["builder"]
    draft = "<b>draft</b> " + "y" * (20001 - len("<b>draft</b> "))
    assert len(draft) == 20001
    headers = {**HX, "X-CSRFToken": token} if htmx else {}
    data = {"instructions": draft} if htmx else {"instructions": draft, "csrf_token": token}
    response = client.post(f"/agents/{agent.id}/instructions", data=data, headers=headers)
    assert response.status_code == 422
    html = response.get_data(as_text=True)
    assert ("<html" in html) is not htmx
    escaped = "&lt;b&gt;draft&lt;/b&gt; " + "y" * (20001 - len("<b>draft</b> "))
    assert escaped in html.split("<textarea", 1)[1].split("</textarea>", 1)[0]
    assert_described_error(html, "agent-instructions-text", "20000")
    assert "Instructions saved." not in html
    assert instructions(db, agent) == "Build things."


def test_run_page_shows_the_run(client, db, board):
    agent = board["builder"]
    issue = board["build"]
    run = HeartbeatRun(
        company_id=board["company"].id,
        agent_id=agent.id,
        issue_id=issue.id,
        status="failed",
        invocation_source="assignment",
        context_snapshot={"issueId": str(issue.id), "wakeReason": "<assigned>"},
        error="adapter exited with 2",
        started_at=datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        finished_at=datetime(2026, 1, 2, 3, 5, 6, tzinfo=UTC),
    )
    db.session.add(run)
    db.session.commit()
    sign_in(client, board["user"])
    response = client.get(f"/runs/{run.id}")
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "Run of Builder" in html
    assert f'href="/tasks/{issue.id}"' in html
    assert issue.identifier in html
    assert "failed" in html and "assignment" in html
    assert "2026-01-02 03:04:05" in html and "2026-01-02 03:05:06" in html
    assert "<code>issueId</code>" in html and "<code>wakeReason</code>" in html
    assert "&lt;assigned&gt;" not in html  # keys only, never the values
    assert "adapter exited with 2" in html


def test_run_page_without_task_or_context(client, db, board):
    run = HeartbeatRun(company_id=board["company"].id, agent_id=board["researcher"].id, status="queued")
    db.session.add(run)
    db.session.commit()
    sign_in(client, board["user"])
    html = client.get(f"/runs/{run.id}").get_data(as_text=True)
    assert "No task" in html
    assert "Not started" in html and "Not finished" in html
    assert "The run was given no context." in html


def test_api_comment_and_run_read_back(client, db, make, board):
    comment = make.comment(board["build"], board["user"], "API visible")
    run = HeartbeatRun(
        company_id=board["company"].id,
        agent_id=board["builder"].id,
        issue_id=board["build"].id,
        status="running",
        context_snapshot={"b": 1, "a": 2},
    )
    db.session.add(run)
    db.session.commit()
    sign_in(client, board["user"])
    got = client.get(f"/api/comments/{comment.id}")
    assert got.status_code == 200
    assert got.json["id"] == str(comment.id)
    assert got.json["issueId"] == str(board["build"].id)
    assert got.json["body"] == "API visible"
    assert got.json["authorUserId"] == str(board["user"].id)
    assert got.json["authorAgentId"] is None
    run_json = client.get(f"/api/runs/{run.id}").json
    assert run_json["agentId"] == str(board["builder"].id)
    assert run_json["issueId"] == str(board["build"].id)
    assert run_json["status"] == "running"
    assert run_json["contextSnapshotKeys"] == ["a", "b"]
    assert run_json["startedAt"] is None
    assert run_json["createdAt"].endswith("+00:00")


def test_signed_out_htmx_request_asks_htmx_to_navigate_to_login(client, board):
    response = client.get(
        "/tasks",
        query_string={"status": "todo"},
        headers={**HX, "HX-Target": "task-list", "HX-Current-URL": "http://localhost/tasks?status=blocked"},
    )
    assert response.status_code == 401
    assert "<html" not in response.get_data(as_text=True)
    assert "Sign in to continue." in response.get_data(as_text=True)
    location = urlsplit(response.headers["HX-Redirect"])
    assert location.path == "/login"
    assert parse_qs(location.query) == {"next": ["/tasks?status=blocked"]}


@pytest.mark.parametrize("current", ["https://evil.com/tasks", "", "javascript:alert(1)"])
def test_signed_out_htmx_request_never_returns_off_site(client, board, current):
    response = client.get("/tasks", headers={**HX, "HX-Current-URL": current})
    assert response.status_code == 401
    assert parse_qs(urlsplit(response.headers["HX-Redirect"]).query) == {"next": ["/"]}


def test_signed_out_page_request_is_redirected_to_login(client, board):
    response = client.get("/tasks?status=todo")
    assert response.status_code == 302
    assert parse_qs(urlsplit(response.headers["Location"]).query) == {"next": ["/tasks?status=todo"]}


def test_the_thread_poller_answers_204_until_something_arrives(client, db, make, board):
    """The open task page polls its thread items (issue 15): nothing changed -> 204 (no swap, one cheap statement);
    a new comment or card -> the items alone, with the new tag."""
    from tests.conftest import count_statements

    sign_in(client, board["user"])
    issue = board["build"]
    page = client.get(f"/tasks/{issue.id}").get_data(as_text=True)
    tag = re.search(r'/tasks/[^/]+/items\?v=([0-9a-f]+)"', page).group(1)
    assert 'hx-trigger="every 5s" data-poll-paused-by-dialog' in page
    with count_statements(db.engine) as statements:
        quiet = client.get(f"/tasks/{issue.id}/items?v={tag}", headers=HX)
    assert quiet.status_code == 204 and quiet.get_data() == b""
    thread_statements = [s for s in statements if "comments" in s and "thread_interactions" in s]
    assert len(thread_statements) == 1, statements
    db.session.add(Comment(company_id=issue.company_id, issue_id=issue.id, body="Done with the wrist"))
    db.session.commit()
    fresh = client.get(f"/tasks/{issue.id}/items?v={tag}", headers=HX)
    assert fresh.status_code == 200
    html = fresh.get_data(as_text=True)
    assert html.lstrip().startswith('<ol class="thread"') and "<html" not in html
    assert "Done with the wrist" in html
    new_tag = re.search(r"/items\?v=([0-9a-f]+)", html).group(1)
    assert new_tag != tag
    assert client.get(f"/tasks/{issue.id}/items?v={new_tag}", headers=HX).status_code == 204


def test_an_empty_filtered_list_offers_to_clear_the_filters(client, board):
    sign_in(client, board["user"])
    empty = client.get("/tasks", query_string={"status": "blocked"}).get_data(as_text=True)
    assert "No tasks match." in empty and ">Clear filters</a>" in empty
    unfiltered = client.get("/tasks").get_data(as_text=True)
    assert "Clear filters" not in unfiltered
