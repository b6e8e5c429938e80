"""Open dynamic client registration (`/register`, issue 29) is throttled per client address in the shared throttle
store: past the limit it answers 429 with Retry-After in OAuth's JSON shape, and writes no client."""

from __future__ import annotations

from sqlalchemy import func, select

from app.models.assistants import AssistantClient
from tests.web.assistant_oauth.flow import REDIRECT, register


def _clients(db) -> int:
    return db.session.scalar(select(func.count()).select_from(AssistantClient))


def test_registration_is_limited_per_address(app, db, client, monkeypatch):
    monkeypatch.setitem(app.config, "OAUTH_REGISTRATIONS_PER_ADDRESS", 2)
    monkeypatch.setitem(app.config, "OAUTH_REGISTRATION_WINDOW_SECONDS", 600)
    register(client, name="One")
    register(client, name="Two")
    before = _clients(db)

    refused = client.post(
        "/register",
        json={"client_name": "Three", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
    )
    assert refused.status_code == 429
    wait = int(refused.headers["Retry-After"])
    assert 1 <= wait <= 600
    assert refused.json == {
        "error": "invalid_request",
        "error_description": f"Too many client registrations from this address. Try again in {wait} seconds.",
    }
    assert _clients(db) == before

    # Another address still registers.
    other = client.post(
        "/register",
        json={"client_name": "Elsewhere", "redirect_uris": [REDIRECT], "token_endpoint_auth_method": "none"},
        environ_base={"REMOTE_ADDR": "127.0.0.2"},
    )
    assert other.status_code == 201, other.get_data(as_text=True)
