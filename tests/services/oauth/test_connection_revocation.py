"""Disconnect and delete of an OAuth connection through the real redirects: the grant's tokens are revoked at the
local OpenID Provider (RFC 7009, its metadata names `revocation_endpoint`), which then calls them inactive."""

from __future__ import annotations

import uuid

import requests
from sqlalchemy import select

from app.models import ActivityLog, GrantSecret, ToolConnection
from app.services.connections.endpoint import OAUTH_ACCESS_TOKEN_KEY, OAUTH_REFRESH_TOKEN_KEY, stored_secrets
from tests.peers.oidc_fixtures import MCP_RESOURCE_CLIENT
from tests.services.oauth.test_oauth import Browser, _connection, _grant, live, owner  # noqa: F401 (fixtures)


def _active(oidc, token: str) -> bool:
    response = requests.post(
        f"{oidc.issuer}/token/introspection", data={"token": token}, auth=MCP_RESOURCE_CLIENT, timeout=10
    )
    response.raise_for_status()
    return bool(response.json().get("active"))


def _tokens(db, connection_id) -> tuple[str, str]:
    secrets = stored_secrets(_grant(db, connection_id))
    return secrets[OAUTH_ACCESS_TOKEN_KEY], secrets[OAUTH_REFRESH_TOKEN_KEY]


def _post(browser: Browser, path: str) -> requests.Response:
    return browser.keep(
        browser.http.post(
            f"{browser.base}{path}", data={"csrf_token": browser.csrf}, allow_redirects=False, timeout=10
        )
    )


def test_disconnect_revokes_the_tokens_at_the_provider_and_reconnect_signs_in_again(
    live,  # noqa: F811
    owner,  # noqa: F811
    db,
    oidc,
):
    company, user = owner
    browser = Browser(live, user)
    connection_id = browser.connect(company)
    access, refresh = _tokens(db, connection_id)
    assert _active(oidc, access) and _active(oidc, refresh)
    page = browser.http.get(f"{live}/apps/{connection_id}/permissions", timeout=10).text
    assert 'data-testid="account-label"' in page and "Signed in to Linear as" in page

    response = _post(browser, f"/apps/{connection_id}/disconnect")
    assert response.status_code == 303, response.text
    assert oidc.stats()["revocations"] >= 1
    assert not _active(oidc, access) and not _active(oidc, refresh)
    connection = _connection(db, connection_id)
    assert connection.status == "disconnected" and connection.provider_account_label is None
    assert db.session.scalars(select(GrantSecret)).all() == []
    row = db.session.scalar(select(ActivityLog).where(ActivityLog.action == "tool_connection.disconnected"))
    assert list(row.details["providerRevocation"].values()) == ["revoked"]
    assert access not in str(row.details) and refresh not in str(row.details)

    # Reconnect: the same connection signs in again.
    again = browser.connect(company, connection_id)
    assert again == connection_id and _connection(db, connection_id).status == "active"


def test_delete_revokes_the_tokens_then_removes_the_connection(
    live,  # noqa: F811
    owner,  # noqa: F811
    db,
    oidc,
):
    company, user = owner
    browser = Browser(live, user)
    connection_id = browser.connect(company)
    access, refresh = _tokens(db, connection_id)
    response = browser.http.delete(
        f"{live}/api/tool-connections/{connection_id}", headers={"X-CSRFToken": browser.csrf}, timeout=10
    )
    assert response.status_code == 204, response.text
    assert not _active(oidc, access) and not _active(oidc, refresh)
    db.session.expire_all()
    assert db.session.get(ToolConnection, uuid.UUID(connection_id)) is None
