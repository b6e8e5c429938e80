"""The Inbox badge follows an answer at once (issue 27 item 6), in Chromium at 1366 and 390 px: the badge's 5 s poll
is taken away in the page, so only the `inbox-changed` event the answer sends can update it."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in_through_the_form
from tests.doors import request_service
from tests.factories import DEFAULT_PASSWORD

# The badge without its poll: the same element, listening only for the event the card endpoints send.
WITHOUT_THE_POLL = """() => {
  const nav = document.getElementById("inbox-nav");
  const copy = nav.cloneNode(true);
  copy.setAttribute("hx-trigger", "inbox-changed from:body");
  nav.replaceWith(copy);
  htmx.process(copy);
}"""


@pytest.mark.browser
@pytest.mark.parametrize("width", [1366, 390])
def test_the_badge_follows_an_answer_without_waiting_for_its_poll(
    app, db, make, live_server, browser, artifacts, width
):
    company = make.company("Acme", "ACME")
    owner = make.member(company, "owner", user=make.user("olivia@example.com", "Olivia Owner"))
    agent = make.agent(company, "Builder")
    issue = make.issue(
        company, title="Ship the report", status="in_progress", assignee=agent, responsible=owner
    )
    _, token = make.run(agent, issue)
    interaction_id = request_service(app.test_client(), token, "honcho").json["interactionId"]

    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)
    page.goto(f"{live_server}/tasks/{issue.id}")
    expect(page.locator("#inbox-nav .inbox-count")).to_have_text("1")
    expect(page.locator("#menu-count .inbox-count")).to_have_text("1")
    page.evaluate(WITHOUT_THE_POLL)

    card = page.locator(f"#intent-card-{interaction_id}")
    card.get_by_role("button", name="Not now").click()
    expect(card.get_by_text("Connection declined")).to_be_visible()
    expect(page.locator("#inbox-nav .inbox-count")).to_have_count(0)
    expect(page.locator("#menu-count .inbox-count")).to_have_count(0)
    context.close()
