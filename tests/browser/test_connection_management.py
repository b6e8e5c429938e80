"""Connection management in Chromium: a failed setup stays one draft that is deleted from the list; a live
connection is disabled from the list and enabled from its Permissions page; an OAuth connection is disconnected
(revoked at the local OpenID Provider) and a connection is deleted from its confirmation page."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from app.models import ActivityLog, ToolConnection
from tests.browser.conftest import sign_in_through_the_form
from tests.factories import DEFAULT_PASSWORD
from tests.peers.mcp_servers import HONCHO_KEY

WORKSPACE = "team-workspace"


@pytest.fixture
def peers_config(app, live_server, honcho_server, oidc, oauth_mcp, monkeypatch):
    monkeypatch.setitem(app.config, "PUBLIC_BASE_URL", live_server)
    monkeypatch.setitem(
        app.config, "PROVIDER_SERVER_URLS", {"honcho": honcho_server.url, "notion": oauth_mcp.url}
    )
    monkeypatch.setitem(app.config, "OAUTH_CLIENTS", {})
    return live_server


def connections(db, **where) -> list[ToolConnection]:
    db.session.rollback()
    query = select(ToolConnection)
    for key, value in where.items():
        query = query.where(getattr(ToolConnection, key) == value)
    return list(db.session.scalars(query))


def submit_honcho_key(page, base: str, key: str) -> None:
    page.goto(f"{base}/apps/honcho/connect")
    page.get_by_label("API key").fill(key)
    workspace = page.get_by_label("Honcho workspace")
    if workspace.is_editable():
        workspace.fill(WORKSPACE)
    page.get_by_role("button", name="Connect", exact=True).click()


def row_of(page, name: str):
    return page.locator("table.connections-table tbody tr").filter(
        has=page.get_by_role("link", name=name, exact=True)
    )


@pytest.mark.browser
def test_drafts_disable_disconnect_and_delete(db, make, peers_config, page, oidc):
    base = peers_config
    company = make.company("Acme")
    owner = make.member(company, "owner")
    make.agent(company, "Builder")
    sign_in_through_the_form(page, base, owner.email, DEFAULT_PASSWORD)

    # Two refused keys: one draft, listed as Draft with Continue and Delete.
    for attempt in ("wrong-key-1", "wrong-key-2"):
        submit_honcho_key(page, base, attempt)
        expect(page.locator("#setup-flow-refusal")).to_be_visible()
    assert [(c.name, c.status) for c in connections(db)] == [("Honcho", "draft")]
    page.goto(f"{base}/connections")
    draft_row = row_of(page, "Honcho")
    expect(draft_row.get_by_text("Draft", exact=True)).to_be_visible()
    expect(draft_row.get_by_role("link", name="Continue setting up Honcho")).to_be_visible()
    draft_row.get_by_role("link", name="Delete Honcho").click()
    expect(page.get_by_role("heading", name="Delete Honcho?", level=1)).to_be_visible()
    page.get_by_role("button", name="Delete Honcho").click()
    page.wait_for_url(f"{base}/connections")
    expect(page.get_by_text("Honcho is deleted.")).to_be_visible()
    assert connections(db) == []

    # A verified key: the Permissions page shows the indexed tools; disable from the list, enable from the page.
    submit_honcho_key(page, base, HONCHO_KEY)
    page.wait_for_url(lambda url: url.endswith("/permissions?done=connected"))
    expect(page.get_by_test_id("tools-indexed")).to_contain_text("read")
    expect(page.get_by_test_id("tools-indexed")).to_contain_text("search_memory")
    honcho = connections(db, app_slug="honcho")[0]
    page.goto(f"{base}/connections")
    row_of(page, "Honcho").get_by_role("button", name="Disable Honcho").click()
    expect(page.get_by_text("Honcho is disabled. Agents no longer see its tools.")).to_be_visible()
    expect(row_of(page, "Honcho").get_by_role("button", name="Enable Honcho")).to_be_visible()
    assert connections(db, id=honcho.id)[0].enabled is False
    page.goto(f"{base}/apps/{honcho.id}/permissions")
    page.get_by_role("button", name="Enable Honcho").click()
    expect(page.get_by_text("Honcho is enabled again.")).to_be_visible()
    assert connections(db, id=honcho.id)[0].enabled is True

    # An OAuth connection (Notion through the local OpenID Provider), then Disconnect from its Permissions page.
    page.goto(f"{base}/apps/notion/connect")
    page.get_by_role("button", name="Sign in with Notion").click()
    page.wait_for_url(f"{oidc.issuer}/**")
    page.fill("input[name=login]", "alice")
    page.fill("input[name=password]", "any")
    page.get_by_role("button", name="Sign-in").click()
    page.locator("input[name=prompt][value=consent]").wait_for(state="attached")
    page.get_by_role("button", name="Continue").click()
    page.wait_for_url(lambda url: url.endswith("/permissions?done=connected"))
    expect(page.get_by_test_id("account-label")).to_contain_text("Signed in to Notion as")
    notion = connections(db, app_slug="notion")[0]
    revocations_before = oidc.stats()["revocations"]
    page.get_by_role("link", name="Disconnect Notion").click()
    expect(page.get_by_role("heading", name="Disconnect Notion?", level=1)).to_be_visible()
    expect(page.locator(".impact-agents")).to_contain_text("Builder")
    page.get_by_role("button", name="Disconnect Notion").click()
    page.wait_for_url(f"**/apps/{notion.id}/permissions")
    expect(page.get_by_text("Notion is disconnected. Its credentials are deleted.")).to_be_visible()
    expect(page.locator("header .connection-status-disconnected")).to_have_text("Disconnected")
    expect(page.get_by_role("link", name="Reconnect Notion")).to_be_visible()
    assert oidc.stats()["revocations"] > revocations_before
    assert connections(db, id=notion.id)[0].status == "disconnected"

    # Delete Honcho from its Permissions page: the confirmation lists the agents that lose access.
    page.goto(f"{base}/apps/{honcho.id}/permissions")
    page.get_by_role("link", name="Delete Honcho").click()
    expect(page.locator(".impact-agents")).to_contain_text("Builder")
    page.get_by_role("button", name="Delete Honcho").click()
    page.wait_for_url(f"{base}/connections")
    expect(row_of(page, "Honcho")).to_have_count(0)
    expect(row_of(page, "Notion")).to_have_count(1)
    assert connections(db, id=honcho.id) == []
    db.session.rollback()
    logged = {r.action for r in db.session.scalars(select(ActivityLog))}
    assert {
        "tool_app.setup_failed",
        "tool_connection.disabled",
        "tool_connection.enabled",
        "tool_connection.disconnected",
        "tool_connection.deleted",
    } <= logged
