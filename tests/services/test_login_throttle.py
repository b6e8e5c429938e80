"""Sign-in throttling counts failures per (email, client address): strangers slow themselves, not the owner.

The test client sets the client address with `environ_base={"REMOTE_ADDR": ...}`; X-Forwarded-For counts only
when the app is configured to trust a number of proxies (`SWITCHBOARD_TRUSTED_PROXIES`).
"""

from __future__ import annotations

import pytest

from app.config import load_config
from tests.conftest import TEST_CONFIG
from tests.factories import DEFAULT_PASSWORD
from tests.web.test_auth import LOGIN_CSRF_RE, session_user_id

STRANGER = "203.0.113.7"
OWNER_HOME = "198.51.100.20"
OWNER_EMAIL = "owner@example.com"


def client_at(app, address: str):
    client = app.test_client()
    client.environ_base["REMOTE_ADDR"] = address
    return client


def attempt(client, email: str, password: str, headers: dict | None = None):
    page = client.get("/login", headers=headers)
    token = LOGIN_CSRF_RE.search(page.get_data(as_text=True)).group(1)
    return client.post(
        "/login", data={"csrf_token": token, "email": email, "password": password}, headers=headers
    )


@pytest.fixture
def owner(make):
    return make.member(make.company(), "owner", user=make.user(email=OWNER_EMAIL))


def test_a_strangers_failures_do_not_lock_the_owner_out_from_another_address(app, db, owner):
    stranger = client_at(app, STRANGER)
    statuses = [attempt(stranger, OWNER_EMAIL, f"guess {i}").status_code for i in range(8)]
    assert statuses == [401] * 5 + [429] * 3

    at_home = client_at(app, OWNER_HOME)
    response = attempt(at_home, OWNER_EMAIL.upper(), DEFAULT_PASSWORD)
    assert response.status_code == 303
    assert session_user_id(at_home) == str(owner.id)
    # The stranger is still throttled, even with the right password.
    assert attempt(stranger, OWNER_EMAIL, DEFAULT_PASSWORD).status_code == 429
    assert session_user_id(stranger) is None


def test_the_same_address_and_email_get_a_clear_429_page(app, db, owner):
    stranger = client_at(app, STRANGER)
    for i in range(5):
        assert attempt(stranger, OWNER_EMAIL, f"guess {i}").status_code == 401
    response = attempt(stranger, OWNER_EMAIL, DEFAULT_PASSWORD)
    assert response.status_code == 429
    html = response.get_data(as_text=True)
    assert "Too many failed sign-in attempts. Try again in 15 minutes" in html
    assert 'name="email"' in html  # the sign-in form is still there
    assert 1 <= int(response.headers["Retry-After"]) <= 900
    # Other emails from that address are counted on their own.
    other = attempt(stranger, "someone-else@example.com", "guess")
    assert other.status_code == 401


def test_a_forged_forwarded_for_header_is_ignored_unless_proxies_are_configured(app, db, owner):
    stranger = client_at(app, STRANGER)
    for i in range(5):
        attempt(stranger, OWNER_EMAIL, f"guess {i}", headers={"X-Forwarded-For": f"192.0.2.{i}"})
    forged = attempt(stranger, OWNER_EMAIL, DEFAULT_PASSWORD, headers={"X-Forwarded-For": OWNER_HOME})
    assert forged.status_code == 429


def test_behind_a_configured_proxy_the_forwarded_client_address_counts(app, db, owner):
    from app import create_app

    proxied = create_app(
        {
            **TEST_CONFIG,
            "SQLALCHEMY_DATABASE_URI": app.config["SQLALCHEMY_DATABASE_URI"],
            "TRUSTED_PROXY_COUNT": 1,
        }
    )
    proxy = client_at(proxied, "10.0.0.2")  # every request arrives from the proxy
    for i in range(5):
        attempt(proxy, OWNER_EMAIL, f"guess {i}", headers={"X-Forwarded-For": STRANGER})
    assert attempt(proxy, OWNER_EMAIL, "again", headers={"X-Forwarded-For": STRANGER}).status_code == 429
    owner_via_proxy = attempt(proxy, OWNER_EMAIL, DEFAULT_PASSWORD, headers={"X-Forwarded-For": OWNER_HOME})
    assert owner_via_proxy.status_code == 303


def test_throttle_settings_come_from_the_environment(monkeypatch, tmp_path):
    assert load_config(str(tmp_path))["LOGIN_THROTTLE_STORAGE_URI"] == "database"
    assert load_config(str(tmp_path))["TRUSTED_PROXY_COUNT"] == 0
    monkeypatch.setenv("SWITCHBOARD_LOGIN_THROTTLE_STORAGE_URI", "redis://cache.internal:6379/2")
    monkeypatch.setenv("SWITCHBOARD_TRUSTED_PROXIES", "1")
    config = load_config(str(tmp_path))
    assert config["LOGIN_THROTTLE_STORAGE_URI"] == "redis://cache.internal:6379/2"
    assert config["TRUSTED_PROXY_COUNT"] == 1
