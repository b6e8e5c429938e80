"""OAuth connections through the real redirects: our app on a live loopback server, a real OpenID Provider (npm
`oidc-provider`) with dynamic registration and PKCE, and an MCP provider that only accepts that issuer's tokens.

A `requests.Session` plays the browser: it signs in to Switchboard, starts the sign-in, follows the provider's login
and consent forms, and arrives at our callback. Refresh is exercised through the service against the same provider.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import parse_qs, urljoin, urlsplit

import pytest
import requests
from sqlalchemy import func, select, update

from app.models import (
    ActivityLog,
    ConnectionGrant,
    GrantSecret,
    OAuthClientRegistration,
    OAuthState,
    ToolConnection,
    ToolPolicy,
)
from app.models.base import utcnow
from app.services.connections.endpoint import OAUTH_ACCESS_TOKEN_KEY, OAUTH_REFRESH_TOKEN_KEY, stored_secrets
from app.services.connections.setup import _store_secret
from app.services.oauth import callback as oauth_callback
from app.services.oauth import clients as oauth_clients
from app.services.oauth import errors as oauth_errors
from app.services.oauth import flow as oauth_flow
from app.services.oauth import tokens as oauth_tokens
from app.services.secrets_box import decrypt
from tests.conftest import serving
from tests.factories import DEFAULT_PASSWORD

APP_SLUG = "linear"  # its `mcp-oauth` method declares dynamic client registration
METHOD_KEY = "mcp-oauth"
CSRF_RE = re.compile(r'"X-CSRFToken": "([^"]+)"')
FORM_CSRF_RE = re.compile(r'name="csrf_token" type="hidden" value="([^"]+)"')
FORM_ACTION_RE = re.compile(r'<form[^>]*action="([^"]+)"[^>]*method="post"')
ABORT_RE = re.compile(r'href="([^"]*/abort)"')


# -- a live Switchboard and a browser ------------------------------------------------------------------------------


@pytest.fixture
def live(app, db, oauth_mcp, oidc):
    """Our app served on a free loopback port; PUBLIC_BASE_URL and the linear MCP URL point at the live peers."""
    saved = {key: app.config.get(key) for key in ("PUBLIC_BASE_URL", "PROVIDER_SERVER_URLS", "OAUTH_CLIENTS")}
    with serving(app) as base:
        app.config.update(
            PUBLIC_BASE_URL=base, PROVIDER_SERVER_URLS={APP_SLUG: oauth_mcp.url}, OAUTH_CLIENTS={}
        )
        try:
            yield base
        finally:
            app.config.update(saved)


class Browser:
    """A person's browser: a cookie jar that signs in to Switchboard and walks through the provider's forms."""

    def __init__(self, base: str, user):
        self.base = base
        self.http = requests.Session()
        self.pages: list[bytes] = []
        page = self.http.get(f"{base}/login", timeout=10)
        token = FORM_CSRF_RE.search(page.text).group(1)
        response = self.http.post(
            f"{base}/login",
            data={"email": user.email, "password": DEFAULT_PASSWORD, "csrf_token": token},
            allow_redirects=False,
            timeout=10,
        )
        assert response.status_code == 303, response.text
        self.csrf = CSRF_RE.search(self.http.get(f"{base}/apps", timeout=10).text).group(1)

    def keep(self, response: requests.Response) -> requests.Response:
        self.pages.append(response.content)
        return response

    def create_draft(self, company, identity: str = "user", **extra) -> str:
        response = self.keep(
            self.http.post(
                f"{self.base}/api/companies/{company.id}/tools/apps/connect",
                json={"appSlug": APP_SLUG, "methodKey": METHOD_KEY, "identity": identity, **extra},
                headers={"X-CSRFToken": self.csrf},
                timeout=10,
            )
        )
        assert response.status_code == 201, response.text
        return response.json()["id"]

    def start(self, connection_id: str) -> str:
        """Submit the setup flow's sign-in button; returns the provider's authorization URL."""
        response = self.keep(
            self.http.post(
                f"{self.base}/apps/{connection_id}/oauth/start",
                data={"csrf_token": self.csrf},
                allow_redirects=False,
                timeout=10,
            )
        )
        assert response.status_code == 303, response.text
        return response.headers["Location"]

    def authorize(self, authorization_url: str, *, login: str = "alice", deny: bool = False) -> str:
        """Follow the provider's login and consent forms; returns our callback URL (not yet visited)."""
        callback_prefix = f"{self.base}{oauth_clients.CALLBACK_PATH}"
        response = self.http.get(authorization_url, allow_redirects=False, timeout=10)
        for _ in range(20):
            if response.status_code in (302, 303):
                location = urljoin(response.url, response.headers["Location"])
                if location.startswith(callback_prefix):
                    return location
                response = self.http.get(location, allow_redirects=False, timeout=10)
                continue
            assert response.status_code == 200, response.text
            html = response.text
            if deny:
                response = self.http.get(
                    urljoin(response.url, ABORT_RE.search(html).group(1)), allow_redirects=False, timeout=10
                )
                continue
            action = urljoin(response.url, FORM_ACTION_RE.search(html).group(1))
            if 'name="login"' in html:
                data = {"prompt": "login", "login": login, "password": "any"}
            else:
                data = {"prompt": "consent"}
            response = self.http.post(action, data=data, allow_redirects=False, timeout=10)
        raise AssertionError("the provider never redirected back to the callback")

    def callback(self, url: str) -> requests.Response:
        return self.keep(self.http.get(url, allow_redirects=False, timeout=10))

    def connect(self, company, connection_id: str | None = None, **kwargs) -> str:
        connection_id = connection_id or self.create_draft(company)
        response = self.callback(self.authorize(self.start(connection_id), **kwargs))
        assert response.status_code == 303, response.text
        assert response.headers["Location"].endswith(f"/apps/{connection_id}/permissions?done=connected")
        return connection_id


@pytest.fixture
def owner(make):
    company = make.company()
    user = make.member(company, "owner")
    return company, user


def _connection(db, connection_id) -> ToolConnection:
    db.session.expire_all()
    return db.session.get(
        ToolConnection, connection_id if not isinstance(connection_id, str) else _uuid(connection_id)
    )


def _uuid(value: str):
    import uuid

    return uuid.UUID(value)


def _grant(db, connection_id) -> ConnectionGrant:
    db.session.expire_all()
    return db.session.scalars(
        select(ConnectionGrant).where(ConnectionGrant.connection_id == _uuid(connection_id))
    ).one()


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def _expire_access_token(db, connection_id) -> ConnectionGrant:
    grant = _grant(db, connection_id)
    grant.provider_tenant = {**grant.provider_tenant, "expiresAt": int(time.time()) - 10}
    db.session.commit()
    return grant


# -- the flow ------------------------------------------------------------------------------------------------------


def test_sign_in_connects_with_pkce_discovery_and_registration(live, owner, db, oidc, oauth_mcp):
    company, user = owner
    browser = Browser(live, user)
    connection_id = browser.create_draft(company)
    authorization_url = browser.start(connection_id)

    assert authorization_url.startswith(f"{oidc.issuer}/auth?")
    query = parse_qs(urlsplit(authorization_url).query)
    assert query["code_challenge_method"] == ["S256"]
    assert len(query["code_challenge"][0]) >= 43
    assert "code_verifier" not in query and "code_verifier" not in authorization_url
    assert query["redirect_uri"] == [f"{live}/oauth/callback"]
    # RFC 8707: the token is asked for the MCP server itself (the peer accepts only tokens whose `aud` names it,
    # and the issuer binds a token only when each token request names the resource too).
    assert query["resource"] == [oauth_mcp.url]
    assert len(query["state"][0]) >= 22  # at least 128 bits, URL-safe
    state_row = db.session.scalars(select(OAuthState)).one()
    assert state_row.state_hash != query["state"][0] and query["state"][0] not in json.dumps(
        state_row.provider
    )
    assert state_row.code_verifier and state_row.user_id == user.id and state_row.identity == "user"

    response = browser.callback(browser.authorize(authorization_url))
    assert response.status_code == 303
    assert response.headers["Location"].endswith(f"/apps/{connection_id}/permissions?done=connected")

    connection = _connection(db, connection_id)
    assert (connection.status, connection.enabled, connection.health_status) == ("active", True, "healthy")
    assert connection.provider_account_label == "alice@example.test"
    grant = _grant(db, connection_id)
    assert grant.status == "active" and "openid" in grant.scopes
    assert (
        grant.provider_tenant["accountLabel"] == "alice@example.test"
    )  # from the ID token: userinfo refuses
    assert grant.provider_tenant["resource"] == oauth_mcp.url  # bound tokens; refreshes name it again
    assert grant.provider_tenant["expiresAt"] > time.time()
    secrets = stored_secrets(grant)
    assert set(secrets) == {OAUTH_ACCESS_TOKEN_KEY, OAUTH_REFRESH_TOKEN_KEY}
    ciphertexts = [row.ciphertext for row in db.session.scalars(select(GrantSecret))]
    assert secrets[OAUTH_ACCESS_TOKEN_KEY] not in ciphertexts
    # The provider saw exactly the stored token when Switchboard indexed its tools.
    assert _digest(secrets[OAUTH_ACCESS_TOKEN_KEY]) in oauth_mcp.accepted_token_digests
    tools = browser.http.get(f"{live}/api/tool-connections/{connection_id}", timeout=10).json()["tools"]
    assert {t["name"] for t in tools} == {"search_docs", "create_doc"}
    assert oidc.stats()["registrations"] == 1
    assert oidc.token_requests("authorization_code") == 1
    actions = list(
        db.session.scalars(select(ActivityLog.action).where(ActivityLog.entity_id == connection_id))
    )
    assert "tool_app.oauth_connected" in actions and "tool_app.finished" in actions


def test_replayed_tampered_and_expired_state_are_400_and_store_nothing(live, owner, db, oidc):
    company, user = owner
    browser = Browser(live, user)
    connection_id = browser.create_draft(company)
    callback_url = browser.authorize(browser.start(connection_id))

    tampered = callback_url.replace("state=", "state=x")
    response = browser.callback(tampered)
    assert response.status_code == 400 and oauth_errors.INVALID_STATE in response.text
    assert oidc.token_requests("authorization_code") == 0

    assert browser.callback(callback_url).status_code == 303
    replay = browser.callback(callback_url)
    assert replay.status_code == 400 and oauth_errors.INVALID_STATE in replay.text
    assert 'href="/apps"' in replay.text  # a way to start again
    assert oidc.token_requests("authorization_code") == 1

    # Expired: a second draft whose state outlived its ten minutes.
    second_id = browser.create_draft(company)
    callback_url = browser.authorize(browser.start(second_id))
    db.session.execute(
        update(OAuthState)
        .where(OAuthState.connection_id == _uuid(second_id))
        .values(expires_at=utcnow() - oauth_flow.STATE_TTL)
    )
    db.session.commit()
    expired = browser.callback(callback_url)
    assert expired.status_code == 400 and oauth_errors.INVALID_STATE in expired.text
    assert _connection(db, second_id).status == "draft"
    assert stored_secrets(_grant(db, second_id)) == {}
    assert oidc.token_requests("authorization_code") == 1


def test_another_users_session_at_the_callback_is_403_and_stores_nothing(live, owner, make, db, oidc):
    company, user = owner
    other = make.member(company, "admin")
    browser = Browser(live, user)
    connection_id = browser.create_draft(company)
    callback_url = browser.authorize(browser.start(connection_id))

    intruder = Browser(live, other)
    response = intruder.callback(callback_url)
    assert response.status_code == 403
    assert _connection(db, connection_id).status == "draft"
    assert stored_secrets(_grant(db, connection_id)) == {}
    assert oidc.token_requests("authorization_code") == 0
    assert db.session.scalars(select(OAuthState)).one().consumed_at is None

    # The person who started it can still finish.
    assert browser.callback(callback_url).status_code == 303
    assert _connection(db, connection_id).status == "active"


def test_access_denied_keeps_the_draft_retryable(live, owner, db, oidc):
    company, user = owner
    browser = Browser(live, user)
    connection_id = browser.create_draft(company)
    callback_url = browser.authorize(browser.start(connection_id), deny=True)
    assert "error=access_denied" in callback_url

    response = browser.callback(callback_url)
    assert response.status_code == 400
    assert "Sign-in to Linear was cancelled" in response.text
    assert "End-User aborted interaction" not in response.text  # the provider's own words are never reflected
    assert f'action="/apps/{connection_id}/oauth/start"' in response.text
    assert _connection(db, connection_id).status == "draft"
    failed = db.session.scalars(
        select(ActivityLog).where(ActivityLog.action == "tool_app.oauth_failed")
    ).one()
    assert failed.details["reason"] == "access_denied"

    browser.connect(company, connection_id)
    assert _connection(db, connection_id).status == "active"


def test_dynamic_registration_happens_once_per_company_and_app(live, owner, make, db, oidc):
    company, user = owner
    browser = Browser(live, user)
    browser.connect(company)
    browser.connect(company)
    assert oidc.stats()["registrations"] == 1
    assert db.session.scalar(select(func.count()).select_from(OAuthClientRegistration)) == 1
    registration = db.session.scalars(select(OAuthClientRegistration)).one()
    secret = decrypt(registration.client_secret_ciphertext)
    assert secret and secret not in json.dumps(registration.registration)
    assert "registration_access_token" not in registration.registration

    other_company = make.company()
    other_user = make.member(other_company, "owner")
    Browser(live, other_user).connect(other_company)
    assert oidc.stats()["registrations"] == 2


def test_operator_configured_client_skips_registration(live, owner, app, db, oidc):
    company, user = owner
    client = oidc.register_client(f"{live}/oauth/callback")
    app.config["OAUTH_CLIENTS"] = {
        APP_SLUG: {
            "client_id": client["client_id"],
            "client_secret": client["client_secret"],
            "issuer": oidc.issuer,
        }
    }
    browser = Browser(live, user)
    connection_id = browser.connect(company)
    assert oidc.stats()["registrations"] == 1  # only the operator's own registration above
    assert db.session.scalar(select(func.count()).select_from(OAuthClientRegistration)) == 0
    assert _grant(db, connection_id).provider_tenant["clientSource"] == "operator"


def test_parallel_callbacks_with_the_same_state_exchange_once(live, owner, db, oidc):
    company, user = owner
    browser = Browser(live, user)
    connection_id = browser.create_draft(company)
    callback_url = browser.authorize(browser.start(connection_id))
    oidc.configure(tokenDelayMs=200)
    cookies = browser.http.cookies.get_dict(domain="127.0.0.1")

    def hit(_):
        return requests.get(callback_url, cookies=cookies, allow_redirects=False, timeout=20).status_code

    with ThreadPoolExecutor(max_workers=5) as pool:
        statuses = sorted(pool.map(hit, range(5)))
    assert statuses == [303, 400, 400, 400, 400]
    assert oidc.token_requests("authorization_code") == 1
    assert _connection(db, connection_id).status == "active"


# -- refresh -------------------------------------------------------------------------------------------------------


def test_concurrent_refresh_is_single_flight(live, owner, app, db, oidc):
    company, user = owner
    connection_id = Browser(live, user).connect(company)
    before = stored_secrets(_expire_access_token(db, connection_id))
    oidc.configure(tokenDelayMs=200)
    barrier = threading.Barrier(10)

    def use(_):
        with app.app_context():
            connection = db.session.get(ToolConnection, _uuid(connection_id))
            grant = db.session.scalars(
                select(ConnectionGrant).where(ConnectionGrant.connection_id == connection.id)
            ).one()
            barrier.wait(timeout=10)
            return oauth_tokens.get_valid_access_token(connection, grant)

    with ThreadPoolExecutor(max_workers=10) as pool:
        tokens = list(pool.map(use, range(10)))
    assert oidc.token_requests("refresh_token") == 1
    assert len(set(tokens)) == 1 and tokens[0] != before[OAUTH_ACCESS_TOKEN_KEY]
    after = stored_secrets(_grant(db, connection_id))
    assert after[OAUTH_ACCESS_TOKEN_KEY] == tokens[0]
    assert _grant(db, connection_id).provider_tenant["expiresAt"] > time.time() + 60


def connected_search_docs(live, owner, make) -> tuple[str, str, dict, str]:
    """The owner signs in to the OAuth provider (installed for every agent of the company), and a run of an agent
    on the owner's task lists the gateway: (connection id, gateway URL, the run's headers, the search tool's name)."""
    company, user = owner
    connection_id = Browser(live, user).connect(company)
    agent = make.agent(company, "Builder", adapter_type="manual")
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=user)
    _run, token = make.run(agent, issue)
    gateway_url = f"{live}/mcp/gateway"
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}
    listing = requests.post(
        gateway_url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"}, headers=headers, timeout=10
    ).json()
    name = next(t["name"] for t in listing["result"]["tools"] if t["name"].endswith("__search_docs"))
    return connection_id, gateway_url, headers, name


def test_concurrent_gateway_calls_with_an_expired_token_refresh_once(
    app, live, owner, make, db, oidc, oauth_mcp, monkeypatch
):
    """Agents calling the same OAuth connection at once through the gateway: one refresh, every call served."""

    # Eight calls in flight at once: the per-provider bulkhead (tests/services/connections/test_provider_bulkhead.py) must admit them all.
    monkeypatch.setitem(app.config, "PROVIDER_MAX_CONCURRENT_CALLS", 8)

    connection_id, gateway_url, headers, name = connected_search_docs(live, owner, make)
    before = stored_secrets(_expire_access_token(db, connection_id))
    oidc.configure(tokenDelayMs=200)
    barrier = threading.Barrier(8)

    def call(n):
        barrier.wait(timeout=10)
        body = {
            "jsonrpc": "2.0",
            "id": n,
            "method": "tools/call",
            "params": {"name": name, "arguments": {"query": f"q{n}"}},
        }
        return requests.post(gateway_url, json=body, headers=headers, timeout=30).json()

    with ThreadPoolExecutor(max_workers=8) as pool:
        answers = list(pool.map(call, range(8)))
    assert [a["result"].get("isError", False) for a in answers] == [False] * 8, answers
    assert oidc.token_requests("refresh_token") == 1
    refreshed = stored_secrets(_grant(db, connection_id))[OAUTH_ACCESS_TOKEN_KEY]
    assert refreshed != before[OAUTH_ACCESS_TOKEN_KEY]
    served = sorted(args["query"] for tool, args in oauth_mcp.calls if tool == "search_docs")
    # Each call reached the provider once, with the refreshed token.
    assert served == [f"q{n}" for n in range(8)]


def test_rotated_refresh_token_is_saved_and_kept_when_none_comes_back(live, owner, db, oidc):
    company, user = owner
    connection_id = Browser(live, user).connect(company)
    first = stored_secrets(_expire_access_token(db, connection_id))

    oidc.configure(rotate=True)
    connection = _connection(db, connection_id)
    oauth_tokens.get_valid_access_token(connection, _grant(db, connection_id))
    rotated = stored_secrets(_grant(db, connection_id))
    assert rotated[OAUTH_REFRESH_TOKEN_KEY] != first[OAUTH_REFRESH_TOKEN_KEY]
    assert rotated[OAUTH_ACCESS_TOKEN_KEY] != first[OAUTH_ACCESS_TOKEN_KEY]

    oidc.configure(rotate=False)
    _expire_access_token(db, connection_id)
    token = oauth_tokens.get_valid_access_token(_connection(db, connection_id), _grant(db, connection_id))
    kept = stored_secrets(_grant(db, connection_id))
    assert kept[OAUTH_REFRESH_TOKEN_KEY] == rotated[OAUTH_REFRESH_TOKEN_KEY]
    assert kept[OAUTH_ACCESS_TOKEN_KEY] == token != rotated[OAUTH_ACCESS_TOKEN_KEY]
    assert oidc.token_requests("refresh_token") == 2

    # Not due: no request at all.
    assert (
        oauth_tokens.get_valid_access_token(_connection(db, connection_id), _grant(db, connection_id))
        == token
    )
    assert oidc.token_requests("refresh_token") == 2


def test_outage_keeps_credentials_but_invalid_grant_needs_reauthorization(live, owner, db, oidc):
    company, user = owner
    browser = Browser(live, user)
    connection_id = browser.connect(company)
    before = stored_secrets(_expire_access_token(db, connection_id))

    oidc.configure(tokenOutage=503)
    with pytest.raises(oauth_errors.TokenRefreshUnavailable):
        oauth_tokens.get_valid_access_token(_connection(db, connection_id), _grant(db, connection_id))
    assert stored_secrets(_grant(db, connection_id)) == before
    assert _grant(db, connection_id).status == "active"
    assert _connection(db, connection_id).health_status == "healthy"
    assert oidc.stats()["tokenRequests"]["outage"] == 1
    # Backing off: callers during the outage fail at once, without another request to the provider.
    retry_at = _grant(db, connection_id).provider_tenant["refreshRetryAt"]
    assert 0 < retry_at - time.time() <= oauth_tokens.REFRESH_BACKOFF_SECONDS
    with pytest.raises(oauth_errors.TokenRefreshUnavailable):
        oauth_tokens.get_valid_access_token(_connection(db, connection_id), _grant(db, connection_id))
    assert oidc.stats()["tokenRequests"]["outage"] == 1
    grant = _grant(db, connection_id)
    grant.provider_tenant = {**grant.provider_tenant, "refreshRetryAt": int(time.time()) - 1}  # time passes
    db.session.commit()

    oidc.configure(tokenOutage=0)
    oauth_tokens.get_valid_access_token(_connection(db, connection_id), _grant(db, connection_id))
    assert "refreshRetryAt" not in _grant(db, connection_id).provider_tenant  # recovered: no back-off left

    grant = _expire_access_token(db, connection_id)
    _store_secret(grant, OAUTH_REFRESH_TOKEN_KEY, "revoked-or-unknown-refresh-token")
    db.session.commit()
    with pytest.raises(oauth_errors.ReauthorizationRequired):
        oauth_tokens.get_valid_access_token(_connection(db, connection_id), _grant(db, connection_id))
    assert _grant(db, connection_id).status == "needs_reauthorization"
    connection = _connection(db, connection_id)
    assert connection.health_status == "needs_reauthorization"
    assert oidc.token_requests("refresh_token") == 2  # the recovery, then the real provider's invalid_grant

    # Reconnect through the provider clears the attention state.
    browser.connect(company, connection_id)
    assert _grant(db, connection_id).status == "active"
    assert _connection(db, connection_id).health_status == "healthy"


def test_resource_indicators_are_canonical_server_uris():
    assert oauth_flow.resource_indicator("HTTPS://MCP.Example.com/mcp/") == "https://mcp.example.com/mcp"
    assert oauth_flow.resource_indicator("http://127.0.0.1:8123/mcp?x=1#f") == "http://127.0.0.1:8123/mcp"
    assert oauth_flow.resource_indicator("https://mcp.example.com/") == "https://mcp.example.com"


def test_id_token_labels_are_taken_only_from_tokens_for_us_from_the_issuer():
    import jwt

    now = int(time.time())
    claims = {"iss": "https://id.example", "aud": "client-1", "exp": now + 60, "email": "a@example.test"}

    def label(**changes):
        token = jwt.encode(
            {**claims, **changes}, "a-signing-key-the-label-check-does-not-need", algorithm="HS256"
        )
        return oauth_callback._id_token_label(token, "https://id.example/", "client-1")

    assert label() == "a@example.test"
    assert label(aud="someone-else") is None
    assert label(iss="https://evil.example") is None
    assert label(exp=now - 120) is None
    assert oauth_callback._id_token_label("not-a-jwt", "https://id.example", "client-1") is None


def test_expiry_from_expires_at_or_unknown():
    assert oauth_callback._expires_at({"expires_at": 2_000_000_000}) == 2_000_000_000
    assert abs(oauth_callback._expires_at({"expires_in": 3600}) - (time.time() + 3600)) < 5
    assert oauth_callback._expires_at({}) is None
    assert oauth_tokens._is_due({"expiresAt": None}) is False
    assert oauth_tokens._is_due({"expiresAt": time.time() + 30}) is True  # inside the 60 s skew
    assert oauth_tokens._is_due({"expiresAt": time.time() + 600}) is False


# -- reconnect and secrecy -----------------------------------------------------------------------------------------


def test_reconnect_keeps_id_grants_instructions_and_policies(live, owner, db, oidc):
    company, user = owner
    browser = Browser(live, user)
    connection_id = browser.connect(company)
    response = browser.http.patch(
        f"{live}/api/tool-connections/{connection_id}",
        json={
            "agentInstructions": {"enabled": True, "text": "Search docs before writing."},
            "toolPolicies": {"create_doc": "block"},
        },
        headers={"X-CSRFToken": browser.csrf},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    grant_before = _grant(db, connection_id)
    grant_id, access_before = grant_before.id, stored_secrets(grant_before)[OAUTH_ACCESS_TOKEN_KEY]

    browser.connect(company, connection_id)
    connection = _connection(db, connection_id)
    assert connection.agent_instructions["text"] == "Search docs before writing."
    grants = list(
        db.session.scalars(select(ConnectionGrant).where(ConnectionGrant.connection_id == connection.id))
    )
    assert [g.id for g in grants] == [grant_id]
    assert stored_secrets(grants[0])[OAUTH_ACCESS_TOKEN_KEY] != access_before
    policy = db.session.scalars(
        select(ToolPolicy).where(
            ToolPolicy.connection_id == connection.id, ToolPolicy.tool_name == "create_doc"
        )
    ).one()
    assert policy.action == "block"
    assert oidc.stats()["registrations"] == 1
    actions = list(
        db.session.scalars(select(ActivityLog.action).where(ActivityLog.entity_id == connection_id))
    )
    assert "tool_connection.reconnected" in actions


def test_tokens_never_appear_in_pages_api_activity_or_logs(live, owner, db, oidc, caplog):
    caplog.set_level("DEBUG")
    company, user = owner
    browser = Browser(live, user)
    connection_id = browser.connect(company)
    grant = _expire_access_token(db, connection_id)
    first = stored_secrets(grant)
    oauth_tokens.get_valid_access_token(_connection(db, connection_id), _grant(db, connection_id))
    second = stored_secrets(_grant(db, connection_id))
    registration = db.session.scalars(select(OAuthClientRegistration)).one()
    client_secret = decrypt(registration.client_secret_ciphertext)

    for path in (
        f"/apps/{connection_id}/permissions",
        "/connections",
        f"/api/tool-connections/{connection_id}",
        f"/api/companies/{company.id}/tool-connections",
    ):
        response = browser.keep(browser.http.get(f"{live}{path}", timeout=10))
        assert response.status_code == 200, path
    activity = json.dumps([row.details for row in db.session.scalars(select(ActivityLog))]).encode()
    logs = caplog.text.encode() + b"\n".join(str(record.__dict__).encode() for record in caplog.records)
    haystacks = [*browser.pages, activity, logs]
    secrets = {*first.values(), *second.values(), client_secret}
    for secret in secrets:
        needle = secret.encode()
        assert not any(needle in hay for hay in haystacks)
