"""The first five minutes' polish (issue 27 item 6) in Chromium at 1366 and 390 px, as owner and member: category
chips read as words and a search hides the empty ones, logos keep one size on catalog cards and connection cards,
the Inbox's current tab is told apart from the other, and Settings > Notifications says no email is sent when no mail
server is set up. Every page is checked with axe."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in_through_the_form
from tests.browser.test_accessibility import BLOCKING, axe_violations
from tests.doors import request_service
from tests.factories import DEFAULT_PASSWORD


def assert_no_violations(page) -> None:
    blocking = [v["id"] for v in axe_violations(page) if v["impact"] in BLOCKING]
    assert blocking == [], blocking


def box(locator) -> tuple[float, float]:
    found = locator.bounding_box()
    assert found is not None
    return round(found["width"]), round(found["height"])


@pytest.mark.browser
@pytest.mark.parametrize("width", [1366, 390])
@pytest.mark.parametrize("role", ["owner", "member"])
def test_chips_logos_tabs_and_notifications_read_right(
    app, db, make, live_server, browser, artifacts, width, role
):
    company = make.company("Acme", "ACME")
    person = make.member(company, role, user=make.user(f"{role}@example.com", f"Pat {role.title()}"))
    agent = make.agent(company, "Builder")
    issue = make.issue(
        company, title="Ship the report", status="in_progress", assignee=agent, responsible=person
    )
    _, token = make.run(agent, issue)
    interaction_id = request_service(app.test_client(), token, "notion").json["interactionId"]

    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    sign_in_through_the_form(page, live_server, person.email, DEFAULT_PASSWORD)

    page.goto(f"{live_server}/apps")
    chips = page.get_by_role("navigation", name="Categories")
    expect(chips.get_by_role("link", name="AI", exact=False).first).to_be_visible()
    expect(chips.get_by_text("CRM", exact=False)).to_have_count(1)
    expect(chips.get_by_text("Ai ", exact=True)).to_have_count(0)
    logos = page.locator(".app-card .app-logo")
    assert {box(logos.nth(i)) for i in range(logos.count())} == {(32, 32)}
    page.screenshot(path=str(artifacts / f"polish-apps-{role}-{width}.png"))
    assert_no_violations(page)
    page.get_by_role("searchbox").fill("memory")
    expect(page.locator("#app-list")).not_to_contain_text("Payments")
    expect(chips.locator(".count", has_text="0")).to_have_count(0)

    page.goto(f"{live_server}/tasks/{issue.id}")
    assert box(page.locator(f"#intent-card-{interaction_id} .app-logo")) == (32, 32)

    page.goto(f"{live_server}/inbox")
    tabs = page.get_by_role("navigation", name="Inbox tabs")
    current, other = tabs.get_by_role("link", name="Waiting for you 1"), tabs.get_by_role("link", name="Done")
    expect(current).to_have_attribute("aria-current", "page")
    expect(current).to_have_css("font-weight", "700")
    expect(other).not_to_have_css("font-weight", "700")
    page.screenshot(path=str(artifacts / f"polish-inbox-{role}-{width}.png"))
    assert_no_violations(page)

    page.goto(f"{live_server}/settings/notifications")
    expect(page.locator("#email-status")).to_contain_text("This Switchboard sends no email.")
    expect(page.get_by_role("switch")).to_have_count(0)
    page.screenshot(path=str(artifacts / f"polish-notifications-{role}-{width}.png"))
    assert_no_violations(page)
    context.close()
