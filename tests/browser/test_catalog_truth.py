"""The catalog's truth in Chromium at desktop and phone widths (issue 27 item 2): an app this installation cannot
connect is marked before any click, a connected app says by whom, and the Connections list filters by owner."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in_through_the_form
from tests.factories import DEFAULT_PASSWORD


@pytest.mark.browser
@pytest.mark.parametrize("viewport", [{"width": 1366, "height": 900}, {"width": 390, "height": 844}])
def test_the_catalog_and_the_connections_list_tell_the_truth(app, make, acme, live_server, browser, viewport):
    company, owner, member, *_ = acme
    make.connection(company, slug="honcho", name="My memory", grants=[("user", member)])
    make.connection(company, slug="github", name="Company GitHub", grants=[("organization", None)])
    saved = app.config.get("OAUTH_CLIENTS")
    app.config["OAUTH_CLIENTS"] = {}
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        sign_in_through_the_form(page, live_server, member.email, DEFAULT_PASSWORD)
        page.goto(f"{live_server}/apps")
        slack = page.locator("article.app-card", has=page.get_by_role("heading", name="Slack", exact=True))
        expect(slack.locator(".app-needs-admin")).to_contain_text("Needs setup by an admin")
        expect(slack.get_by_role("button", name="Details")).to_be_visible()
        honcho = page.locator("article.app-card", has=page.get_by_role("heading", name="Honcho", exact=True))
        expect(honcho.locator(".app-connected")).to_have_text("Connected by you")
        github = page.locator("article.app-card", has=page.get_by_role("heading", name="GitHub", exact=True))
        expect(github.locator(".app-connected")).to_have_text("Connected for the organization")

        page.goto(f"{live_server}/connections")
        expect(page.locator("#connections-count")).to_have_text("2 of 2 connections")
        page.get_by_label("Owner").select_option("mine")
        page.get_by_role("button", name="Filter").click()
        expect(page.locator("#connections-count")).to_have_text("1 of 2 connections")
        expect(page.get_by_role("link", name="My memory", exact=True)).to_be_visible()
        expect(page.get_by_role("link", name="Company GitHub", exact=True)).to_have_count(0)
        assert "owner=mine" in page.url
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    finally:
        context.close()
        app.config["OAUTH_CLIENTS"] = saved
