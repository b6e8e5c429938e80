"""OAuth from a connection card in Chromium, against the local OpenID Provider and an MCP server that accepts only
its tokens (issue 16): one "Sign in" click in the card's dialog opens the provider's sign-in window, and the card
turns connected when the window reports back; a connection whose sign-in stopped working (the provider refused its
refresh token) is reconnected from the next card with one click, keeping its id."""

from __future__ import annotations

import time
import uuid

import pytest
from playwright.sync_api import expect
from sqlalchemy import func, select

from app.models import ActivityLog, ConnectionGrant, ThreadInteraction, ToolConnection
from app.services.connections.endpoint import OAUTH_REFRESH_TOKEN_KEY
from app.services.connections.setup import _store_secret
from app.services.oauth import errors as oauth_errors
from app.services.oauth import tokens as oauth_tokens
from tests.browser.conftest import sign_in_through_the_form
from tests.doors import request_service
from tests.factories import DEFAULT_PASSWORD

# Counts the clicks that land on a button of the task page (capture phase, so htmx swaps cannot hide one).
COUNT_BUTTON_CLICKS = """() => {
  window.__buttonClicks = [];
  document.addEventListener("click", (event) => {
    const button = event.target.closest("button");
    if (button) window.__buttonClicks.push(button.textContent.trim());
  }, true);
}"""


@pytest.fixture
def notion_peers(app, live_server, oidc, oauth_mcp, monkeypatch):
    """Notion's MCP server is the OAuth peer; Switchboard registers itself at the provider (no operator client)."""
    monkeypatch.setitem(app.config, "PUBLIC_BASE_URL", live_server)
    monkeypatch.setitem(app.config, "PROVIDER_SERVER_URLS", {"notion": oauth_mcp.url})
    monkeypatch.setitem(app.config, "OAUTH_CLIENTS", {})
    return live_server


@pytest.fixture
def card_world(app, db, make):
    company = make.company("Acme")
    owner = make.member(company, "owner", user=make.user(name="Dana Owner"))
    agent = make.agent(company, "Builder")
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    _, token = make.run(agent, issue)
    return owner, issue, token


def ask_for_notion(app, token) -> str:
    answer = request_service(app.test_client(), token, "notion").json
    assert answer["state"] == "needs_user_action", answer
    return answer["interactionId"]


def sign_in_at_the_provider(popup, oidc, *, signed_in_before: bool = False) -> None:
    """The provider's own login (skipped when its session remembers the person) and consent forms; the callback
    page then reports to the card and closes the window."""
    popup.set_default_timeout(15_000)
    popup.wait_for_url(f"{oidc.issuer}/**")
    if not signed_in_before:
        popup.fill("input[name=login]", "alice")
        popup.fill("input[name=password]", "any")
        popup.get_by_role("button", name="Sign-in").click()
    popup.locator("input[name=prompt][value=consent]").wait_for(state="attached")
    with popup.expect_event("close", timeout=30_000):
        popup.get_by_role("button", name="Continue").click()


def open_the_dialog(page, base: str, issue, interaction_id: str):
    page.goto(f"{base}/tasks/{issue.id}")
    card = page.locator(f"#intent-card-{interaction_id}")
    card.get_by_role("button", name="Connect", exact=True).click()
    dialog = page.locator(f"#intent-dialog-{interaction_id}")
    expect(dialog.get_by_role("heading", name="Connect Notion for Builder")).to_be_visible()
    page.evaluate(COUNT_BUTTON_CLICKS)
    return card, dialog


def one_click_sign_in(page, dialog, button_name: str, oidc, **kwargs) -> None:
    with page.expect_popup() as popup_info:
        dialog.locator("#setup-flow").get_by_role("button", name=button_name).click()
    sign_in_at_the_provider(popup_info.value, oidc, **kwargs)


def the_card_is_connected(page, card, interaction_id: str, db) -> ThreadInteraction:
    expect(card.get_by_text("Notion connected")).to_be_visible()
    expect(page.locator("dialog[open]")).to_have_count(0)
    expect(card).to_be_focused()
    db.session.expire_all()
    return db.session.get(ThreadInteraction, uuid.UUID(interaction_id))


def oauth_starts(db) -> int:
    db.session.rollback()
    return db.session.scalar(
        select(func.count()).select_from(ActivityLog).where(ActivityLog.action == "tool_app.oauth_started")
    )


@pytest.mark.browser
def test_one_sign_in_click_in_the_card_dialog_connects_notion(
    app, db, notion_peers, card_world, page, oidc, oauth_mcp, artifacts
):
    owner, issue, token = card_world
    interaction_id = ask_for_notion(app, token)
    sign_in_through_the_form(page, notion_peers, owner.email, DEFAULT_PASSWORD)
    card, dialog = open_the_dialog(page, notion_peers, issue, interaction_id)
    page.screenshot(path=str(artifacts / "card-oauth-dialog.png"))

    one_click_sign_in(page, dialog, "Sign in with Notion", oidc)

    interaction = the_card_is_connected(page, card, interaction_id, db)
    assert page.evaluate("window.__buttonClicks") == ["Sign in with Notion"]
    assert interaction.status == "accepted"
    connection = db.session.get(ToolConnection, uuid.UUID(interaction.result["connectionId"]))
    assert (connection.app_slug, connection.status, connection.health_status) == (
        "notion",
        "active",
        "healthy",
    )
    assert oauth_starts(db) == 1
    assert oauth_mcp.accepted_token_digests, "the Notion peer never saw a valid access token"


@pytest.mark.browser
def test_a_connection_that_needs_a_new_sign_in_is_reconnected_from_the_card(
    app, db, notion_peers, card_world, page, oidc, artifacts
):
    owner, issue, token = card_world
    first = ask_for_notion(app, token)
    sign_in_through_the_form(page, notion_peers, owner.email, DEFAULT_PASSWORD)
    card, dialog = open_the_dialog(page, notion_peers, issue, first)
    one_click_sign_in(page, dialog, "Sign in with Notion", oidc)
    connection_id = uuid.UUID(the_card_is_connected(page, card, first, db).result["connectionId"])

    # The provider refuses the stored refresh token: the token service marks the connection for a new sign-in.
    grant = db.session.scalars(
        select(ConnectionGrant).where(ConnectionGrant.connection_id == connection_id)
    ).one()
    grant.provider_tenant = {**grant.provider_tenant, "expiresAt": int(time.time()) - 10}
    _store_secret(grant, OAUTH_REFRESH_TOKEN_KEY, "revoked-or-unknown-refresh-token")
    db.session.commit()
    with pytest.raises(oauth_errors.ReauthorizationRequired):
        oauth_tokens.get_valid_access_token(db.session.get(ToolConnection, connection_id), grant)
    db.session.expire_all()
    assert db.session.get(ToolConnection, connection_id).health_status == "needs_reauthorization"

    second = ask_for_notion(app, token)
    card, dialog = open_the_dialog(page, notion_peers, issue, second)
    expect(dialog.get_by_role("heading", name="Reconnect Notion")).to_be_visible()
    expect(dialog.get_by_text("Notion needs you to sign in again")).to_be_visible()
    page.screenshot(path=str(artifacts / "card-oauth-reconnect.png"))

    one_click_sign_in(page, dialog, "Reconnect with Notion", oidc, signed_in_before=True)

    interaction = the_card_is_connected(page, card, second, db)
    assert page.evaluate("window.__buttonClicks") == ["Reconnect with Notion"]
    assert interaction.status == "accepted"
    assert interaction.result["connectionId"] == str(connection_id)
    notion = list(db.session.scalars(select(ToolConnection).where(ToolConnection.app_slug == "notion")))
    assert [(c.id, c.status, c.health_status) for c in notion] == [(connection_id, "active", "healthy")]
    grant = db.session.scalars(
        select(ConnectionGrant).where(ConnectionGrant.connection_id == connection_id)
    ).one()
    assert grant.status == "active"
    assert oauth_starts(db) == 2
