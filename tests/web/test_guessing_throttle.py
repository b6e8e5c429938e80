"""Issue 33 item 10: guessing is limited per client address across emails, API keys and run tokens. A guessing
client over real HTTP on loopback (the app served by `serving`) gets 429 with Retry-After once its address has 30
failed authentications in the window, whatever it was guessing; another address keeps the usual 401."""

from __future__ import annotations

import httpx
import pytest

from app.config import load_config
from app.services.accounts import create_api_key
from tests.conftest import serving
from tests.web.test_auth import login_form_token

MESSAGE = "Too many failed authentication attempts from this address. Try again in {} seconds."
GATEWAY = "/mcp/gateway"


@pytest.fixture(autouse=True)
def address_limit(app, tmp_path):
    """The default limit (the suite's configuration raises it for the fuzzers)."""
    saved = app.config["AUTH_ADDRESS_MAX_FAILURES"]
    app.config["AUTH_ADDRESS_MAX_FAILURES"] = load_config(str(tmp_path))["AUTH_ADDRESS_MAX_FAILURES"]
    assert app.config["AUTH_ADDRESS_MAX_FAILURES"] == 30
    yield
    app.config["AUTH_ADDRESS_MAX_FAILURES"] = saved


@pytest.fixture
def base(app, db):
    with serving(app) as url:
        yield url


def retry_after_of(response) -> int:
    wait = int(response.headers["Retry-After"])
    assert 1 <= wait <= 900
    return wait


def test_three_hundred_api_key_guesses_are_throttled(db, make, base):
    company = make.company()
    owner = make.user(email="kim@example.com")
    make.member(company, "owner", user=owner)
    _key, secret = create_api_key(owner, "ci")
    db.session.commit()
    issues = f"/api/companies/{company.id}/issues"
    with httpx.Client(base_url=base) as owner_client:  # the key works, from the address before any guessing
        assert owner_client.get(issues, headers={"Authorization": f"Bearer {secret}"}).status_code == 200
    statuses = []
    with httpx.Client(base_url=base) as guesser:
        for n in range(300):
            answer = guesser.get(issues, headers={"Authorization": f"Bearer sb_guess_{n:04d}"})
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                break
        assert statuses == [401] * 30 + [429]
        wait = retry_after_of(answer)
        assert answer.json() == {"error": MESSAGE.format(wait)}
        # The address is refused before any key is looked up: even the right key waits.
        right = guesser.get(issues, headers={"Authorization": f"Bearer {secret}"})
        assert right.status_code == 429 and right.json() == {"error": MESSAGE.format(retry_after_of(right))}
        # Pages without a credential are not part of it.
        assert guesser.get("/login").status_code == 200


def test_three_hundred_run_token_guesses_get_a_json_rpc_429(db, base):
    statuses = []
    with httpx.Client(base_url=base) as guesser:
        for n in range(300):
            answer = guesser.post(
                GATEWAY,
                json={"jsonrpc": "2.0", "id": n, "method": "tools/list"},
                headers={"Authorization": f"Bearer guess.{n}.token"},
            )
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                break
    assert statuses == [401] * 30 + [429]
    wait = retry_after_of(answer)
    assert answer.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32600, "message": MESSAGE.format(wait)},
    }


def test_spraying_forty_emails_from_one_address_is_throttled(client, db, make):
    statuses = []
    for n in range(40):
        data = {"csrf_token": login_form_token(client), "email": f"p{n}@example.com", "password": "guess"}
        statuses.append(client.post("/login", data=data).status_code)
    assert statuses == [401] * 30 + [429] * 10
    data = {"csrf_token": login_form_token(client), "email": "p0@example.com", "password": "guess"}
    refused = client.post("/login", data=data)
    assert "Too many failed sign-in attempts from this network. Try again in 15 minutes." in refused.get_data(
        as_text=True
    )
    assert 1 <= int(refused.headers["Retry-After"]) <= 900
    # Another address is unaffected: a wrong password there is the usual 401.
    data = {"csrf_token": login_form_token(client), "email": "p0@example.com", "password": "guess"}
    other = client.post("/login", data=data, environ_base={"REMOTE_ADDR": "192.0.2.7"})
    assert other.status_code == 401
