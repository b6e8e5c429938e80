"""CSRF on every state change: forms and htmx need the token; bearer-authenticated API calls do not."""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from app.models import ActivityLog, Comment
from app.services.accounts import create_api_key, revoke_api_key
from tests.conftest import sign_in

CSRF_MESSAGE = "The form expired or is missing its security token."


def comment_count(db) -> int:
    db.session.expire_all()
    return db.session.scalar(select(func.count()).select_from(Comment))


@pytest.fixture
def board(make):
    company = make.company()
    user = make.member(company, "member")
    issue = make.issue(company, title="Ship it")
    return company, user, issue


def api_key_for(db, user) -> str:
    _key, token = create_api_key(user, "test key")
    db.session.commit()
    return token


@pytest.mark.parametrize("htmx", [False, True], ids=["form", "htmx"])
def test_comment_post_without_token_is_rejected_and_writes_nothing(client, db, board, htmx):
    _company, user, issue = board
    sign_in(client, user)
    headers = {"HX-Request": "true"} if htmx else {}
    response = client.post(f"/tasks/{issue.id}/comments", data={"body": "sneaky"}, headers=headers)
    assert response.status_code == 400
    html = response.get_data(as_text=True)
    assert CSRF_MESSAGE in html
    assert ("<html" in html) is not htmx
    assert comment_count(db) == 0


@pytest.mark.parametrize("htmx", [False, True], ids=["form", "htmx"])
def test_comment_post_with_a_wrong_token_is_rejected(client, db, board, htmx):
    _company, user, issue = board
    sign_in(client, user)
    headers = {"HX-Request": "true", "X-CSRFToken": "forged"} if htmx else {}
    data = {"body": "sneaky"} if htmx else {"body": "sneaky", "csrf_token": "forged"}
    response = client.post(f"/tasks/{issue.id}/comments", data=data, headers=headers)
    assert response.status_code == 400
    assert comment_count(db) == 0


def test_token_from_another_session_is_rejected(app, client, db, board, make):
    company, user, issue = board
    other_client = app.test_client()
    other_token = sign_in(other_client, make.member(company, "member"))
    sign_in(client, user)
    response = client.post(f"/tasks/{issue.id}/comments", data={"body": "x", "csrf_token": other_token})
    assert response.status_code == 400
    assert comment_count(db) == 0


def test_comment_with_token_in_form_field_succeeds(client, db, board):
    _company, user, issue = board
    token = sign_in(client, user)
    response = client.post(f"/tasks/{issue.id}/comments", data={"body": "hello", "csrf_token": token})
    assert response.status_code == 303
    assert comment_count(db) == 1


def test_htmx_comment_with_token_in_header_succeeds(client, db, board):
    _company, user, issue = board
    token = sign_in(client, user)
    response = client.post(
        f"/tasks/{issue.id}/comments",
        data={"body": "hello from htmx"},
        headers={"HX-Request": "true", "X-CSRFToken": token},
    )
    assert response.status_code == 200
    assert "hello from htmx" in response.get_data(as_text=True)
    assert comment_count(db) == 1


@pytest.mark.parametrize(
    ("path", "data"),
    [
        ("/tasks/{issue}/status", {"status": "done"}),
        ("/tasks", {"title": "New"}),
        ("/settings/api-keys", {"name": "k"}),
    ],
)
def test_other_board_writes_need_the_token(client, db, board, path, data):
    _company, user, issue = board
    sign_in(client, user)
    before = db.session.scalar(select(func.count()).select_from(ActivityLog))
    response = client.post(path.format(issue=issue.id), data=data)
    assert response.status_code == 400
    db.session.expire_all()
    assert db.session.scalar(select(func.count()).select_from(ActivityLog)) == before
    assert db.session.get(type(issue), issue.id).status == "todo"


def test_api_post_with_valid_bearer_key_needs_no_csrf(app, db, board):
    _company, user, issue = board
    token = api_key_for(db, user)
    api = app.test_client()  # no cookies at all
    response = api.post(
        f"/api/issues/{issue.id}/comments",
        json={"body": "from the API"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 201, response.get_data(as_text=True)
    assert response.json["body"] == "from the API"
    assert comment_count(db) == 1


@pytest.mark.parametrize("kind", ["invalid", "revoked", "not-a-key", "empty-scheme"])
def test_api_post_with_a_bad_key_is_401(app, db, board, kind):
    _company, user, issue = board
    token = api_key_for(db, user)
    if kind == "revoked":
        key = user_key(db, user)
        revoke_api_key(user, key.id)
        db.session.commit()
    header = {
        "invalid": f"Bearer {token}x",
        "revoked": f"Bearer {token}",
        "not-a-key": "Bearer hello",
        "empty-scheme": "Bearer ",
    }[kind]
    api = app.test_client()
    response = api.post(
        f"/api/issues/{issue.id}/comments", json={"body": "nope"}, headers={"Authorization": header}
    )
    assert response.status_code == 401
    assert response.json == {"error": response.json["error"]}
    assert comment_count(db) == 0


def user_key(db, user):
    from app.models import ApiKey

    return db.session.scalar(select(ApiKey).where(ApiKey.user_id == user.id))


def test_api_post_with_session_cookie_but_no_csrf_header_is_refused(client, db, board):
    _company, user, issue = board
    sign_in(client, user)
    response = client.post(f"/api/issues/{issue.id}/comments", json={"body": "cookie only"})
    assert response.status_code == 400
    assert response.json == {"error": CSRF_MESSAGE + " Reload the page and try again."}
    assert comment_count(db) == 0


def test_api_post_with_session_cookie_and_csrf_header_succeeds(client, db, board):
    _company, user, issue = board
    token = sign_in(client, user)
    response = client.post(
        f"/api/issues/{issue.id}/comments", json={"body": "cookie + header"}, headers={"X-CSRFToken": token}
    )
    assert response.status_code == 201
    assert comment_count(db) == 1


def test_invalid_bearer_key_does_not_fall_back_to_the_session_cookie(client, db, board):
    """A browser session must not lend its identity to a request that presents a (bad) API key."""
    _company, user, issue = board
    sign_in(client, user)
    response = client.post(
        f"/api/issues/{issue.id}/comments",
        json={"body": "bad key, good cookie"},
        headers={"Authorization": "Bearer sbk_not-a-real-key"},
    )
    assert response.status_code == 401
    assert comment_count(db) == 0
    read = client.get(f"/api/issues/{issue.id}", headers={"Authorization": "Bearer sbk_not-a-real-key"})
    assert read.status_code == 401


def test_bearer_key_acts_as_its_owner_even_with_another_session_cookie(client, db, board, make):
    company, user, issue = board
    viewer = make.member(company, "viewer")
    sign_in(client, viewer)
    token = api_key_for(db, user)
    response = client.post(
        f"/api/issues/{issue.id}/comments",
        json={"body": "as the key's owner"},
        headers={"Authorization": f"Bearer {token}"},
    )
    assert response.status_code == 201
    db.session.expire_all()
    comment = db.session.scalar(select(Comment))
    assert comment.author_user_id == user.id


def test_bearer_key_is_not_accepted_outside_the_api(app, db, board):
    _company, user, issue = board
    token = api_key_for(db, user)
    api = app.test_client()
    page = api.get(f"/tasks/{issue.id}", headers={"Authorization": f"Bearer {token}"})
    assert page.status_code == 302
    assert page.headers["Location"].startswith("/login")
    post = api.post(
        f"/tasks/{issue.id}/comments", data={"body": "x"}, headers={"Authorization": f"Bearer {token}"}
    )
    assert post.status_code == 400
    assert comment_count(db) == 0


def test_safe_methods_need_no_token(client, board):
    _company, user, issue = board
    sign_in(client, user)
    assert client.get(f"/tasks/{issue.id}").status_code == 200
    assert client.head(f"/tasks/{issue.id}").status_code == 200
