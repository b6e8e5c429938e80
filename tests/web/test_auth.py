"""Sign-in, sign-out, throttling, safe redirects after sign-in, and session cookie flags."""

from __future__ import annotations

import re
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import func, select

from app.config import load_config
from app.models import LoginFailure
from app.services.accounts import safe_next
from tests.conftest import csrf_token_for, sign_in
from tests.factories import DEFAULT_PASSWORD

LOGIN_CSRF_RE = re.compile(r'id="csrf_token" name="csrf_token" type="hidden" value="([^"]+)"')
INVALID = "Invalid email or password."
THROTTLED = "Too many failed sign-in attempts."


def login_form_token(client, path: str = "/login") -> str:
    page = client.get(path)
    assert page.status_code == 200
    match = LOGIN_CSRF_RE.search(page.get_data(as_text=True))
    assert match, "the login form carries no CSRF token"
    return match.group(1)


def post_login(client, email: str, password: str, next_url: str | None = None):
    data = {"csrf_token": login_form_token(client), "email": email, "password": password}
    if next_url is not None:
        data["next"] = next_url
    return client.post("/login", data=data)


def session_user_id(client) -> str | None:
    with client.session_transaction() as sess:
        # The id part of `User.get_id` (the session generation follows it).
        return (sess.get("_user_id") or "").partition(":")[0] or None


def failure_count(db, email: str) -> int:
    return db.session.scalar(
        select(func.count()).select_from(LoginFailure).where(LoginFailure.email == email)
    )


def test_login_page_renders_the_form(client):
    page = client.get("/login")
    assert page.status_code == 200
    html = page.get_data(as_text=True)
    assert 'name="email"' in html and 'name="password"' in html
    assert 'name="csrf_token"' in html


def test_login_success_redirects_to_next_with_303(client, make):
    company = make.company()
    user = make.member(company, "member", user=make.user(email="ada@example.com"))
    response = post_login(client, "ada@example.com", DEFAULT_PASSWORD, next_url="/tasks?status=todo")
    assert response.status_code == 303
    assert response.headers["Location"] == "/tasks?status=todo"
    assert session_user_id(client) == str(user.id)
    assert client.get("/tasks?status=todo").status_code == 200


def test_login_email_is_case_insensitive(client, make):
    user = make.member(make.company(), user=make.user(email="grace@example.com"))
    response = post_login(client, "Grace@Example.COM", DEFAULT_PASSWORD)
    assert response.status_code == 303
    assert response.headers["Location"] == "/"
    assert session_user_id(client) == str(user.id)


def test_wrong_password_is_401_with_message_and_no_session(client, db, make):
    make.member(make.company(), user=make.user(email="bob@example.com"))
    response = post_login(client, "bob@example.com", "not the password")
    assert response.status_code == 401
    assert INVALID in response.get_data(as_text=True)
    assert session_user_id(client) is None
    assert failure_count(db, "bob@example.com") == 1
    # The board still sends the anonymous visitor to the login page.
    home = client.get("/")
    assert home.status_code == 302
    assert home.headers["Location"].startswith("/login")


def test_unknown_email_gets_the_same_answer(client):
    response = post_login(client, "nobody@example.com", "whatever-password")
    assert response.status_code == 401
    assert INVALID in response.get_data(as_text=True)
    assert session_user_id(client) is None


def test_invalid_login_form_is_422_with_inline_errors(client):
    response = client.post("/login", data={"csrf_token": login_form_token(client), "email": "not-an-email"})
    assert response.status_code == 422
    html = response.get_data(as_text=True)
    assert 'class="field-error"' in html
    assert 'value="not-an-email"' in html
    assert session_user_id(client) is None


def test_login_without_csrf_is_refused(client, make):
    make.member(make.company(), user=make.user(email="carol@example.com"))
    response = client.post("/login", data={"email": "carol@example.com", "password": DEFAULT_PASSWORD})
    assert response.status_code == 400
    assert session_user_id(client) is None


def test_logout_with_csrf_ends_the_session(client, make):
    user = make.member(make.company())
    token = sign_in(client, user)
    assert client.get("/").status_code == 200
    response = client.post("/logout", data={"csrf_token": token})
    assert response.status_code == 303
    assert response.headers["Location"] == "/login"
    assert session_user_id(client) is None
    home = client.get("/")
    assert home.status_code == 302
    assert home.headers["Location"].startswith("/login")


def test_logout_without_csrf_keeps_the_session(client, make):
    user = make.member(make.company())
    sign_in(client, user)
    response = client.post("/logout")
    assert response.status_code == 400
    assert session_user_id(client) == str(user.id)
    assert client.get("/").status_code == 200


def test_logout_via_get_is_not_allowed(client, make):
    user = make.member(make.company())
    sign_in(client, user)
    assert client.get("/logout").status_code == 405
    assert session_user_id(client) == str(user.id)


def test_throttling_refuses_even_the_correct_password_after_five_failures(client, db, make):
    user = make.member(make.company(), user=make.user(email="dave@example.com"))
    for _ in range(5):
        assert post_login(client, "dave@example.com", "wrong password").status_code == 401
    assert failure_count(db, "dave@example.com") == 5
    response = post_login(client, "dave@example.com", DEFAULT_PASSWORD)
    assert response.status_code == 429
    assert THROTTLED in response.get_data(as_text=True)
    assert session_user_id(client) is None
    # Throttling is per email: another person signs in normally.
    other = make.member(make.company(), user=make.user(email="erin@example.com"))
    ok = post_login(client, "erin@example.com", DEFAULT_PASSWORD)
    assert ok.status_code == 303
    assert session_user_id(client) == str(other.id)
    assert session_user_id(client) != str(user.id)


def test_throttling_counts_the_email_however_it_is_spelled(client, make):
    make.member(make.company(), user=make.user(email="faye@example.com"))
    for spelling in (
        "faye@example.com",
        "FAYE@example.com",
        "faye@EXAMPLE.com",
        "Faye@Example.com",
        "faye@example.COM",
    ):
        assert post_login(client, spelling, "wrong password").status_code == 401
    response = post_login(client, "faye@example.com", DEFAULT_PASSWORD)
    assert response.status_code == 429


def test_only_wrong_credentials_mark_the_fields_invalid(client, db, make):
    """A wrong password marks both fields invalid; a throttled sign-in (429) says why without blaming the fields."""
    make.member(make.company(), user=make.user(email="ida@example.com"))
    wrong = post_login(client, "ida@example.com", "wrong password")
    assert wrong.status_code == 401
    assert wrong.get_data(as_text=True).count('aria-invalid="true"') == 2
    for _ in range(4):
        post_login(client, "ida@example.com", "wrong password")
    throttled = post_login(client, "ida@example.com", DEFAULT_PASSWORD)
    assert throttled.status_code == 429
    html = throttled.get_data(as_text=True)
    assert THROTTLED in html
    assert "aria-invalid" not in html
    assert html.count('aria-describedby="login-error"') == 2


def test_a_success_clears_the_failure_counter(client, db, make):
    user = make.member(make.company(), user=make.user(email="gus@example.com"))
    for _ in range(4):
        assert post_login(client, "gus@example.com", "wrong password").status_code == 401
    assert failure_count(db, "gus@example.com") == 4
    assert post_login(client, "gus@example.com", DEFAULT_PASSWORD).status_code == 303
    assert failure_count(db, "gus@example.com") == 0
    client.post("/logout", data={"csrf_token": csrf_token_for(client)})
    assert session_user_id(client) is None
    # Four more failures are again below the limit, so the correct password still works.
    for _ in range(4):
        assert post_login(client, "gus@example.com", "wrong password").status_code == 401
    assert post_login(client, "gus@example.com", DEFAULT_PASSWORD).status_code == 303
    assert session_user_id(client) == str(user.id)


def test_failures_outside_the_window_do_not_count(app, client, db, make):
    """The failures are moved out of the window in the shared store itself (the database, by default), so the
    test does not depend on how fast five sign-ins run on a loaded machine."""
    from sqlalchemy import update

    from app.models.shared_state import ThrottleHit

    assert app.config["LOGIN_THROTTLE_STORAGE_URI"] == "database"
    make.member(make.company(), user=make.user(email="hal@example.com"))
    for _ in range(5):
        post_login(client, "hal@example.com", "wrong password")
    assert post_login(client, "hal@example.com", DEFAULT_PASSWORD).status_code == 429
    window = int(app.config["LOGIN_FAILURE_WINDOW_SECONDS"])
    db.session.execute(
        update(ThrottleHit).values(
            at=ThrottleHit.at - window - 1, expires_at=ThrottleHit.expires_at - window - 1
        )
    )
    db.session.commit()
    assert post_login(client, "hal@example.com", DEFAULT_PASSWORD).status_code == 303


@pytest.mark.parametrize(
    "target",
    [
        "//evil.com",
        "//evil.com/path",
        "///evil.com",
        "https://evil.com",
        "http://evil.com/tasks",
        "HTTPS://evil.com",
        "/\\evil.com",
        "\\\\evil.com",
        "\\/evil.com",
        "http:/evil.com",
        "https:evil.com",
        "javascript:alert(1)",
        "JavaScript:alert(1)",
        "data:text/html,<script>alert(1)</script>",
        "evil.com",
        "tasks",
        "/tasks\r\nSet-Cookie: x=y",
        "/tasks\nLocation: https://evil.com",
        "/\t/evil.com",
        " //evil.com",
        "/tasks\x00",
        "",
        "   ",
        None,
    ],
)
def test_safe_next_refuses_off_site_and_malformed_targets(target):
    assert safe_next(target) == "/"
    assert safe_next(target, "/home") == "/home"


@pytest.mark.parametrize(
    "target",
    [
        "/",
        "/tasks",
        "/tasks?status=todo",
        "/tasks?status=todo&assignee=x#top",
        "/%2F%2Fevil.com",
        "/agents/1",
    ],
)
def test_safe_next_keeps_same_site_paths(target):
    assert safe_next(target) == target


@pytest.mark.parametrize("target", ["//evil.com", "https://evil.com", "/\\evil.com", "javascript:alert(1)"])
def test_login_form_never_redirects_off_site(client, make, target):
    make.member(make.company(), user=make.user(email="nx@example.com"))
    page = client.get("/login", query_string={"next": target})
    assert page.status_code == 200
    assert 'name="next" value="/"' in page.get_data(as_text=True)
    response = post_login(client, "nx@example.com", DEFAULT_PASSWORD, next_url=target)
    assert response.status_code == 303
    assert response.headers["Location"] == "/"


def test_login_next_from_query_string_lands_on_home(client, make):
    make.member(make.company(), user=make.user(email="ivy@example.com"))
    token = login_form_token(client, "/login?next=//evil.com")
    response = client.post(
        "/login?next=//evil.com",
        data={"csrf_token": token, "email": "ivy@example.com", "password": DEFAULT_PASSWORD},
    )
    assert response.status_code == 303
    assert response.headers["Location"] == "/"


def test_anonymous_board_request_redirects_to_login_with_relative_next(client):
    response = client.get("/tasks?status=todo")
    assert response.status_code == 302
    location = urlsplit(response.headers["Location"])
    assert location.path == "/login"
    assert not location.netloc
    assert parse_qs(location.query) == {"next": ["/tasks?status=todo"]}


def test_signed_in_visitor_of_login_is_sent_to_a_safe_next(client, make):
    sign_in(client, make.member(make.company()))
    response = client.get("/login?next=https://evil.com")
    assert response.status_code == 302
    assert response.headers["Location"] == "/"


def test_session_cookie_is_httponly_and_samesite_lax(client, make):
    make.member(make.company(), user=make.user(email="jo@example.com"))
    response = post_login(client, "jo@example.com", DEFAULT_PASSWORD)
    assert response.status_code == 303
    cookies = [c for c in response.headers.getlist("Set-Cookie") if c.startswith("session=")]
    assert cookies, "sign-in sets the session cookie"
    flags = [part.strip().lower() for part in cookies[-1].split(";")]
    assert "httponly" in flags
    assert "samesite=lax" in flags
    # The test configuration serves plain http, so the cookie is not marked Secure there.
    assert "secure" not in flags


@pytest.mark.parametrize(
    ("public_base_url", "override", "secure"),
    [
        ("https://switchboard.example.com", None, True),
        ("http://127.0.0.1:5000", None, False),
        ("https://switchboard.example.com", "false", False),
        ("http://127.0.0.1:5000", "true", True),
    ],
)
def test_session_cookie_secure_follows_the_public_base_url(
    monkeypatch, tmp_path, public_base_url, override, secure
):
    monkeypatch.setenv("PUBLIC_BASE_URL", public_base_url)
    if override is None:
        monkeypatch.delenv("SESSION_COOKIE_SECURE", raising=False)
    else:
        monkeypatch.setenv("SESSION_COOKIE_SECURE", override)
    config = load_config(str(tmp_path))
    assert config["SESSION_COOKIE_SECURE"] is secure
    assert config["REMEMBER_COOKIE_SECURE"] is secure
    assert config["SESSION_COOKIE_HTTPONLY"] is True
    assert config["SESSION_COOKIE_SAMESITE"] == "Lax"


def test_sign_in_ignores_spaces_around_a_pasted_email(app, db, make):
    from tests.factories import DEFAULT_PASSWORD

    company = make.company()
    user = make.member(company, "member")
    client = app.test_client()
    page = client.get("/login").get_data(as_text=True)
    import re

    csrf = re.search(r'name="csrf_token" type="hidden" value="([^"]+)"', page).group(1)
    response = client.post(
        "/login", data={"csrf_token": csrf, "email": f"  {user.email}  ", "password": DEFAULT_PASSWORD}
    )
    assert response.status_code == 303


# --- sign-out ends the session on the server --------------------------------------------------------------------


def _signed_in_browser(base: str, email: str):
    """A browser (httpx client with cookies) signed in through the real form on a live server."""
    import httpx

    browser = httpx.Client(base_url=base, follow_redirects=False)
    token = LOGIN_CSRF_RE.search(browser.get("/login").text).group(1)
    answer = browser.post("/login", data={"csrf_token": token, "email": email, "password": DEFAULT_PASSWORD})
    assert answer.status_code == 303, answer.text
    return browser


def test_a_cookie_captured_before_sign_out_no_longer_signs_in(app, db, make):
    """An attacker who copied the session cookie (a shared machine, a proxy log) replays it after the person signed
    out: the server refuses it, although the cookie itself is still validly signed."""
    import httpx

    from tests.conftest import serving

    make.member(make.company(), "owner", user=make.user(email="sam@example.com"))
    with serving(app) as base:
        browser = _signed_in_browser(base, "sam@example.com")
        assert browser.get("/tasks").status_code == 200
        captured = dict(browser.cookies)
        assert captured

        with httpx.Client(base_url=base, cookies=captured, follow_redirects=False) as attacker:
            assert attacker.get("/tasks").status_code == 200  # the replay works while the person is signed in
            assert attacker.get("/api/me/inbox").status_code == 200

        page = browser.get("/tasks").text
        token = re.search(r'"X-CSRFToken": "([^"]+)"', page)
        assert token, "no CSRF token on the page"
        signed_out = browser.post("/logout", data={"csrf_token": token.group(1)})
        assert signed_out.status_code == 303 and signed_out.headers["location"] == "/login"

        with httpx.Client(base_url=base, cookies=captured, follow_redirects=False) as attacker:
            replay = attacker.get("/tasks")
            assert replay.status_code == 302, replay.status_code
            assert replay.headers["location"].startswith("/login")
            assert attacker.get("/api/me/inbox").status_code == 401

        # Signing in again works, and a new session is a new generation.
        again = _signed_in_browser(base, "sam@example.com")
        assert again.get("/tasks").status_code == 200
        browser.close()
        again.close()
