"""A sign-in cancelled at the provider, in Chromium against the local OpenID Provider: the card says that the sign-in
was cancelled and what to do next (never "Setup saved"), and the dialog it reopens lets the person pick another method
or identity for the kept setup."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in_through_the_form
from tests.browser.test_card_oauth import ask_for_notion, card_world, notion_peers, open_the_dialog  # noqa: F401
from tests.factories import DEFAULT_PASSWORD


@pytest.mark.browser
@pytest.mark.parametrize("width", [1366, 390])
def test_a_sign_in_cancelled_at_the_provider_says_so_on_the_card(
    app,
    db,
    notion_peers,  # noqa: F811
    card_world,  # noqa: F811
    browser,
    oidc,
    oauth_mcp,
    artifacts,
    width,
):
    owner, issue, token = card_world
    interaction_id = ask_for_notion(app, token)
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(15_000)
    sign_in_through_the_form(page, notion_peers, owner.email, DEFAULT_PASSWORD)
    card, dialog = open_the_dialog(page, notion_peers, issue, interaction_id)
    with page.expect_popup() as popup_info:
        dialog.locator("#setup-flow").get_by_role("button", name="Sign in with Notion").click()
    popup = popup_info.value
    popup.wait_for_url(f"{oidc.issuer}/**")
    with popup.expect_event("close", timeout=30_000):
        popup.get_by_role("link", name="Cancel").click()
    page.screenshot(path=str(artifacts / f"sign-in-cancelled-{width}.png"), full_page=True)
    note = card.locator(".connection-card-retry")
    expect(note).to_have_text(
        "Sign-in to Notion was cancelled, so nothing was connected. Try again or choose another method."
    )
    expect(card.get_by_text("Setup saved")).to_have_count(0)

    # Try again reopens the kept setup with its identity still choosable (organization, as the owner may).
    card.get_by_role("button", name="Try again").click()
    flow = dialog.locator("#setup-flow")
    expect(flow.locator("#setup-flow-kept")).to_be_visible()
    expect(flow.get_by_role("radio", name="Just me")).to_be_checked()
    organization = flow.get_by_role("radio", name="Organization")
    expect(organization).to_be_enabled()
    organization.check()
    page.screenshot(path=str(artifacts / f"sign-in-try-again-{width}.png"))
    context.close()
