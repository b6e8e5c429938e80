"""Company isolation and roles: another company's objects are missing (404), viewers cannot write (403)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import pytest
from sqlalchemy import func, select

from app.models import ActivityLog, Agent, Comment, HeartbeatRun, Issue, Membership, User
from app.services.accounts import create_api_key
from tests.conftest import sign_in


@dataclass
class World:
    company: object
    owner: User
    agent: Agent
    issue: Issue
    comment: Comment
    run: HeartbeatRun
    membership: Membership


def build_company(db, make, name: str) -> World:
    company = make.company(name)
    owner = make.member(company, "owner")
    agent = make.agent(company, f"{name} agent", instructions=f"{name} original instructions")
    issue = make.issue(company, title=f"{name} task", assignee=agent, responsible=owner)
    comment = make.comment(issue, owner, f"{name} comment")
    run = HeartbeatRun(
        company_id=company.id,
        agent_id=agent.id,
        issue_id=issue.id,
        status="succeeded",
        context_snapshot={"issueId": str(issue.id), "wakeReason": "manual"},
    )
    db.session.add(run)
    db.session.commit()
    return World(company, owner, agent, issue, comment, run, make.membership(company, owner))


@pytest.fixture
def worlds(db, make):
    return build_company(db, make, "Alpha"), build_company(db, make, "Beta")


def snapshot(db, world: World) -> dict:
    """Everything a refused write could have touched, read fresh from the database."""
    db.session.expire_all()
    issue = db.session.get(Issue, world.issue.id)
    return {
        "comments": db.session.scalar(select(func.count()).select_from(Comment)),
        "issues": db.session.scalar(select(func.count()).select_from(Issue)),
        "activity": db.session.scalar(select(func.count()).select_from(ActivityLog)),
        "memberships": db.session.scalar(select(func.count()).select_from(Membership)),
        "users": db.session.scalar(select(func.count()).select_from(User)),
        "status": issue.status,
        "assignee": issue.assignee_agent_id,
        "instructions": db.session.get(Agent, world.agent.id).instructions,
        "roles": sorted(db.session.scalars(select(Membership.role)).all()),
    }


READS = [
    ("page", "/tasks/{issue}"),
    ("page", "/agents/{agent}"),
    ("page", "/agents/{agent}/instructions"),
    ("page", "/runs/{run}"),
    ("api", "/api/issues/{issue}"),
    ("api", "/api/comments/{comment}"),
    ("api", "/api/runs/{run}"),
    ("api", "/api/companies/{company}/issues"),
]


def fill(path: str, world: World) -> str:
    return path.format(
        issue=world.issue.id,
        agent=world.agent.id,
        run=world.run.id,
        comment=world.comment.id,
        company=world.company.id,
        membership=world.membership.id,
    )


@pytest.mark.parametrize(("kind", "path"), READS, ids=[p for _k, p in READS])
def test_reads_of_another_company_are_404_and_own_are_200(client, make, worlds, kind, path):
    alpha, beta = worlds
    user = make.member(alpha.company, "member")
    sign_in(client, user)
    own = client.get(fill(path, alpha), follow_redirects=True)
    assert own.status_code == 200
    other = client.get(fill(path, beta), follow_redirects=True)
    assert other.status_code == 404
    if kind == "api":
        assert other.json == {"error": "Not found"}
    body = other.get_data(as_text=True)
    for secret in ("Beta task", "Beta comment", "Beta original instructions", "Beta agent"):
        assert secret not in body


@pytest.mark.parametrize(("_kind", "path"), [r for r in READS if r[0] == "api"])
def test_api_key_reads_of_another_company_are_404(app, db, worlds, make, _kind, path):
    alpha, beta = worlds
    user = make.member(alpha.company, "member")
    _key, token = create_api_key(user, "k")
    db.session.commit()
    api = app.test_client()
    headers = {"Authorization": f"Bearer {token}"}
    assert api.get(fill(path, alpha), headers=headers).status_code == 200
    other = api.get(fill(path, beta), headers=headers)
    assert other.status_code == 404
    assert other.json == {"error": "Not found"}


@pytest.mark.parametrize("path", ["/tasks/not-a-uuid", "/runs/123", "/api/issues/zzz", "/api/comments/1"])
def test_malformed_ids_are_404(client, make, worlds, path):
    sign_in(client, make.member(worlds[0].company, "member"))
    assert client.get(path).status_code == 404


WRITES = [
    ("comment", "post", "/tasks/{issue}/comments", {"body": "intrusion"}),
    ("comment-htmx", "htmx", "/tasks/{issue}/comments", {"body": "intrusion"}),
    ("status", "post", "/tasks/{issue}/status", {"status": "done"}),
    ("assignee", "post", "/tasks/{issue}/assignee", {"assignee": ""}),
    ("instructions", "post", "/agents/{agent}/instructions", {"instructions": "hijacked"}),
    ("api-comment", "json", "/api/issues/{issue}/comments", {"body": "intrusion"}),
    ("role", "post", "/members/{membership}/role", {"role": "viewer"}),
]


def send(client, token: str, how: str, path: str, data: dict):
    if how == "json":
        return client.post(path, json=data, headers={"X-CSRFToken": token})
    if how == "htmx":
        return client.post(path, data=data, headers={"X-CSRFToken": token, "HX-Request": "true"})
    return client.post(path, data={**data, "csrf_token": token})


@pytest.mark.parametrize(("name", "how", "path", "data"), WRITES, ids=[w[0] for w in WRITES])
def test_writes_to_another_company_are_404_and_change_nothing(
    client, db, make, worlds, name, how, path, data
):
    alpha, beta = worlds
    user = make.member(alpha.company, "owner")
    token = sign_in(client, user)
    before = snapshot(db, beta)
    response = send(client, token, how, fill(path, beta), data)
    assert response.status_code == 404
    assert snapshot(db, beta) == before


@pytest.mark.parametrize(("name", "how", "path", "data"), WRITES, ids=[w[0] for w in WRITES])
def test_viewers_get_403_on_every_write_and_nothing_changes(client, db, make, worlds, name, how, path, data):
    alpha, _beta = worlds
    viewer = make.member(alpha.company, "viewer")
    token = sign_in(client, viewer)
    before = snapshot(db, alpha)
    response = send(client, token, how, fill(path, alpha), data)
    assert response.status_code == 403
    if how == "json":
        assert "error" in response.json
    elif how == "htmx":
        assert "<html" not in response.get_data(as_text=True)
    assert snapshot(db, alpha) == before


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("/tasks", {"title": "Viewer task"}),
        (
            "/members",
            {"email": "new@example.com", "name": "New", "role": "member", "password": "longenough1"},
        ),
        ("/members", {"email": "", "name": ""}),
    ],
    ids=["new-task", "add-member", "add-member-invalid-form"],
)
def test_viewers_get_403_on_company_level_writes(client, db, make, worlds, path, data):
    alpha, _beta = worlds
    token = sign_in(client, make.member(alpha.company, "viewer"))
    before = snapshot(db, alpha)
    response = client.post(path, data={**data, "csrf_token": token})
    assert response.status_code == 403
    assert snapshot(db, alpha) == before


def test_viewer_pages_offer_no_write_forms(client, make, worlds):
    alpha, _beta = worlds
    sign_in(client, make.member(alpha.company, "viewer"))
    task = client.get(f"/tasks/{alpha.issue.id}").get_data(as_text=True)
    assert "/comments" not in task
    assert "/status" not in task
    assert "Alpha comment" in task
    agent = client.get(f"/agents/{alpha.agent.id}/instructions").get_data(as_text=True)
    assert "<textarea" not in agent
    assert "Alpha original instructions" in agent


@pytest.mark.parametrize(
    ("path", "data"),
    [
        (
            "/members",
            {"email": "new@example.com", "name": "New", "role": "member", "password": "longenough1"},
        ),
        ("/members/{membership}/role", {"role": "viewer"}),
    ],
    ids=["add", "change-role"],
)
def test_plain_members_cannot_manage_members(client, db, make, worlds, path, data):
    alpha, _beta = worlds
    token = sign_in(client, make.member(alpha.company, "member"))
    before = snapshot(db, alpha)
    response = client.post(fill(path, alpha), data={**data, "csrf_token": token})
    assert response.status_code == 403
    assert snapshot(db, alpha) == before


@pytest.mark.parametrize("path", ["/", "/tasks", "/agents", "/members", "/tasks/{issue}", "/runs/{run}"])
def test_suspended_members_get_404(client, make, worlds, path):
    alpha, _beta = worlds
    suspended = make.member(alpha.company, "owner", status="suspended")
    sign_in(client, suspended)
    assert client.get(fill(path, alpha)).status_code == 404


def test_suspended_members_cannot_write(client, db, make, worlds):
    alpha, _beta = worlds
    suspended = make.member(alpha.company, "owner", status="suspended")
    token = sign_in(client, suspended)
    before = snapshot(db, alpha)
    response = client.post(f"/tasks/{alpha.issue.id}/comments", data={"body": "x", "csrf_token": token})
    assert response.status_code == 404
    assert snapshot(db, alpha) == before


def test_suspended_in_one_company_still_works_in_another(client, make, worlds):
    alpha, beta = worlds
    user = make.member(alpha.company, "member", status="suspended")
    make.member(beta.company, "member", user=user)
    sign_in(client, user)
    assert client.get(f"/tasks/{alpha.issue.id}").status_code == 404
    assert client.get(f"/tasks/{beta.issue.id}").status_code == 200
    home = client.get("/").get_data(as_text=True)
    assert "Beta" in home


@pytest.mark.parametrize("htmx", [False, True], ids=["form", "htmx"])
def test_assigning_another_companys_agent_is_422_and_changes_nothing(client, db, make, worlds, htmx):
    alpha, beta = worlds
    token = sign_in(client, make.member(alpha.company, "member"))
    before = snapshot(db, alpha)
    headers = {"HX-Request": "true"} if htmx else {}
    response = client.post(
        f"/tasks/{alpha.issue.id}/assignee",
        data={"assignee": str(beta.agent.id), "csrf_token": token},
        headers=headers,
    )
    assert response.status_code == 422
    assert "Choose an agent of this company" in response.get_data(as_text=True)
    assert snapshot(db, alpha) == before


def test_tasks_filter_ignores_another_companys_agent(client, make, worlds):
    alpha, beta = worlds
    sign_in(client, make.member(alpha.company, "member"))
    html = client.get("/tasks", query_string={"assignee": str(beta.agent.id)}).get_data(as_text=True)
    assert "Beta task" not in html
    assert "Alpha task" in html


def test_owner_changes_a_role_on_the_members_page(client, db, make, worlds):
    alpha, _beta = worlds
    member = make.member(alpha.company, "member")
    target = make.membership(alpha.company, member)
    token = sign_in(client, alpha.owner)
    page = client.get("/members").get_data(as_text=True)
    assert f"/members/{target.id}/role" in page
    response = client.post(f"/members/{target.id}/role", data={"role": "admin", "csrf_token": token})
    assert response.status_code == 303
    assert response.headers["Location"] == "/members"
    db.session.expire_all()
    assert db.session.get(Membership, target.id).role == "admin"
    entry = db.session.scalar(select(ActivityLog).where(ActivityLog.action == "member.updated"))
    assert entry.details["before"]["role"] == "member"
    assert entry.details["after"]["role"] == "admin"


def test_invalid_role_is_422(client, db, make, worlds):
    alpha, _beta = worlds
    member = make.member(alpha.company, "member")
    target = make.membership(alpha.company, member)
    token = sign_in(client, alpha.owner)
    response = client.post(f"/members/{target.id}/role", data={"role": "emperor", "csrf_token": token})
    assert response.status_code == 422
    db.session.expire_all()
    assert db.session.get(Membership, target.id).role == "member"


def test_the_last_owner_cannot_be_demoted(client, db, make, worlds):
    alpha, _beta = worlds
    token = sign_in(client, alpha.owner)
    before = snapshot(db, alpha)
    response = client.post(
        f"/members/{alpha.membership.id}/role", data={"role": "member", "csrf_token": token}
    )
    assert response.status_code == 409
    assert "A company needs at least one active owner" in response.get_data(as_text=True)
    assert snapshot(db, alpha) == before


def test_an_owner_can_step_down_when_another_owner_remains(client, db, make, worlds):
    alpha, _beta = worlds
    make.member(alpha.company, "owner")
    token = sign_in(client, alpha.owner)
    response = client.post(
        f"/members/{alpha.membership.id}/role", data={"role": "admin", "csrf_token": token}
    )
    assert response.status_code == 303
    db.session.expire_all()
    assert db.session.get(Membership, alpha.membership.id).role == "admin"


def test_admins_cannot_change_owners(client, db, make, worlds):
    alpha, _beta = worlds
    token = sign_in(client, make.member(alpha.company, "admin"))
    before = snapshot(db, alpha)
    response = client.post(
        f"/members/{alpha.membership.id}/role", data={"role": "viewer", "csrf_token": token}
    )
    assert response.status_code == 403
    assert snapshot(db, alpha) == before


def test_admin_adds_a_new_member_who_can_sign_in(client, db, make, worlds):
    alpha, _beta = worlds
    token = sign_in(client, make.member(alpha.company, "admin"))
    response = client.post(
        "/members",
        data={"email": "newbie@example.com", "name": "Newbie", "role": "member", "csrf_token": token},
    )
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "Their initial password is <code>" in html
    db.session.expire_all()
    user = db.session.scalar(select(User).where(User.email == "newbie@example.com"))
    membership = make.membership(alpha.company, user)
    assert membership.role == "member"
    assert membership.status == "active"


@pytest.mark.parametrize("password", ["attacker-chosen-password", ""], ids=["typed", "generated"])
def test_adding_an_existing_account_keeps_its_password(client, db, make, worlds, password):
    alpha, beta = worlds
    password_hash = beta.owner.password_hash
    token = sign_in(client, alpha.owner)
    response = client.post(
        "/members",
        data={
            "email": beta.owner.email,
            "name": "Whatever",
            "role": "member",
            "password": password,
            "csrf_token": token,
        },
    )
    assert response.status_code == 200
    html = response.get_data(as_text=True)
    assert "Their initial password" not in html
    assert "signs in with their existing password" in html
    db.session.expire_all()
    assert db.session.get(User, beta.owner.id).password_hash == password_hash
    assert make.membership(alpha.company, beta.owner).role == "member"


def test_adding_someone_twice_is_409(client, db, make, worlds):
    alpha, _beta = worlds
    member = make.member(alpha.company, "member")
    token = sign_in(client, alpha.owner)
    before = snapshot(db, alpha)
    response = client.post(
        "/members", data={"email": member.email, "name": "Again", "role": "member", "csrf_token": token}
    )
    assert response.status_code == 409
    assert snapshot(db, alpha) == before


def test_a_refused_role_change_shows_the_saved_role_and_the_reason(client, db, make, worlds):
    alpha, _beta = worlds
    token = sign_in(client, alpha.owner)
    target = alpha.membership
    response = client.post(f"/members/{target.id}/role", data={"role": "viewer", "csrf_token": token})
    assert response.status_code == 409
    html = response.get_data(as_text=True)
    assert f'id="role-error-{target.id}"' in html and "The role stays owner." in html
    select = re.search(rf'<select[^>]*id="role-{target.id}"[^>]*>(.*?)</select>', html, re.S)
    assert select is not None and 'aria-invalid="true"' in select.group(0)
    assert re.search(r'<option selected value="owner">|<option value="owner" selected>', select.group(1))
