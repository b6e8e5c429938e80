"""`switchboard demo --json`: the documented shape, identical output on every run, no duplicates."""

from __future__ import annotations

import json
import re
import uuid

from sqlalchemy import func, select

from app.models import Agent, Company, Issue, Membership, Project, User
from app.services.accounts import find_user_by_email
from tests.conftest import sign_in


def run_demo(app) -> dict:
    result = app.test_cli_runner().invoke(args=["demo", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def counts(db) -> dict:
    db.session.expire_all()
    return {
        model.__name__: db.session.scalar(select(func.count()).select_from(model))
        for model in (Company, User, Membership, Agent, Project, Issue)
    }


def test_demo_json_shape_and_idempotence(app, db):
    first = run_demo(app)
    after_first = counts(db)
    second = run_demo(app)
    assert second == first
    assert counts(db) == after_first
    assert after_first == {"Company": 1, "User": 2, "Membership": 2, "Agent": 2, "Project": 1, "Issue": 4}

    assert set(first) == {"demoProvider", "company", "users", "agents", "issues"}
    assert first["demoProvider"] == {
        "app": "honcho",
        "apiKey": "demo-honcho-key",
        "workspace": "demo",
        "port": 5341,
    }
    assert set(first["company"]) == {"id", "name"}
    company = db.session.get(Company, uuid.UUID(first["company"]["id"]))
    assert company.name == first["company"]["name"]

    users = {u["email"]: u for u in first["users"]}
    assert set(users) == {"owner@example.com", "member@example.com"}
    assert all(set(u) == {"email", "password", "role"} for u in first["users"])
    assert users["owner@example.com"]["role"] == "owner"
    assert users["member@example.com"]["role"] == "member"

    agents = {a["name"]: a["id"] for a in first["agents"]}
    assert set(agents) == {"Builder", "Researcher"}

    owner = find_user_by_email("owner@example.com")
    # Builder works one task from the start; the Honcho task waits, unassigned, for the newcomer's offline loop.
    in_progress = [i for i in first["issues"] if i["status"] == "in_progress" and i["assigneeAgentId"]]
    assert len(in_progress) == 1
    assert in_progress[0]["assigneeAgentId"] == agents["Builder"]
    assert in_progress[0]["responsibleUserId"] == str(owner.id)
    for issue in first["issues"]:
        assert {"id", "identifier", "title", "status"} <= set(issue)


def test_demo_people_sign_in_with_the_printed_passwords(app, db):
    data = run_demo(app)
    for person in data["users"]:
        browser = app.test_client()
        login_page = browser.get("/login").get_data(as_text=True)
        csrf = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', login_page).group(1)
        response = browser.post(
            "/login", data={"csrf_token": csrf, "email": person["email"], "password": person["password"]}
        )
        assert response.status_code == 303, person["email"]
        home = browser.get("/").get_data(as_text=True)
        assert data["company"]["name"] in home
        assert f"({person['role']})" in home


def test_demo_company_is_browsable(app, client, db):
    data = run_demo(app)
    sign_in(client, find_user_by_email("member@example.com"))
    html = client.get("/tasks").get_data(as_text=True)
    for issue in data["issues"]:
        assert issue["title"] in html
    builder = next(a for a in data["agents"] if a["name"] == "Builder")
    filtered = client.get("/tasks", query_string={"assignee": builder["id"], "status": "in_progress"})
    in_progress = next(i for i in data["issues"] if i["status"] == "in_progress" and i["assigneeAgentId"])
    assert in_progress["title"] in filtered.get_data(as_text=True)


def test_demo_without_json_prints_the_sign_in_lines(app, db):
    result = app.test_cli_runner().invoke(args=["demo"])
    assert result.exit_code == 0, result.output
    assert "sign in as owner@example.com / " in result.output
    assert "sign in as member@example.com / " in result.output
    assert "connect it with API key demo-honcho-key and workspace demo" in result.output
