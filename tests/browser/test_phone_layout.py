"""Every page at phone width (390x844) fits the screen: no horizontal overflow, and the main navigation and the
account menu stay reachable (issue 16, "Pages that work everywhere")."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in_through_the_form
from tests.doors import request_service
from tests.factories import DEFAULT_PASSWORD
from tests.services.runtime import test_runtime_rest
from tests.services.runtime.test_runtime_rest import connect, honcho_body

providers = test_runtime_rest.providers  # honcho -> the real MCP peer

PHONE = {"width": 390, "height": 844}
OVERFLOW = "document.documentElement.scrollWidth - window.innerWidth"
# What sticks out, to say which element to fix.
WIDEST = """[...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > window.innerWidth + 1)
  .filter(e => { for (let a = e.parentElement; a; a = a.parentElement) {
      const o = getComputedStyle(a).overflowX; if (o === 'auto' || o === 'scroll' || o === 'hidden') return false; }
    return true; })
  .map(e => e.tagName.toLowerCase() + (e.id ? '#' + e.id : '') + (e.className && e.className.baseVal === undefined
       ? '.' + String(e.className).split(' ').join('.') : '') + ':' + Math.round(e.getBoundingClientRect().right))
  .slice(0, 4)"""


@pytest.fixture
def phone_world(app, db, make, providers) -> tuple[object, list[str]]:
    """A company with one of everything a page can show: a task with a card, a connection, a run, an agent."""
    company = make.company("Acme Robotics Incorporated")
    owner = make.member(company, "owner", user=make.user(name="Dana Owner-With-A-Long-Name"))
    agent = make.agent(company, "Builder")
    issue = make.issue(
        company,
        title="Write the launch notes for the quarterly release in Notion and Honcho",
        status="in_progress",
        assignee=agent,
        responsible=owner,
    )
    run, token = make.run(agent, issue)
    interaction_id = request_service(app.test_client(), token, "notion").json["interactionId"]
    connection = connect(app, owner, company, honcho_body())
    return owner, [
        "/",
        "/tasks",
        f"/tasks/{issue.id}",
        "/agents",
        f"/agents/{agent.id}",
        f"/agents/{agent.id}/instructions",
        f"/agents/{agent.id}/runtime",
        "/apps",
        "/apps/honcho/connect",
        "/connections",
        f"/apps/{connection['id']}/permissions",
        f"/apps/{connection['id']}/reconnect",
        f"/intents/{interaction_id}/dialog",
        f"/runs/{run.id}",
        "/activity",
        "/members",
        "/settings/api-keys",
        "/inbox",
        "/inbox?tab=done",
        "/settings/notifications",
        "/settings/webhooks",
    ]


@pytest.mark.browser
def test_every_page_fits_a_phone_screen(phone_world, live_server, browser, artifacts):
    # The world is made before Chromium starts: its setup talks to the MCP peer with the SDK's own event loop.
    owner, paths = phone_world
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    page.set_default_timeout(10_000)
    page.goto(f"{live_server}/login")
    assert page.evaluate(OVERFLOW) <= 0, "/login"
    sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)
    too_wide = {}
    for number, path in enumerate(paths):
        page.goto(f"{live_server}{path}")
        page.screenshot(path=str(artifacts / f"phone-{number:02d}.png"), full_page=True)
        overflow = page.evaluate(OVERFLOW)
        if overflow > 0:
            too_wide[path] = (overflow, page.evaluate(WIDEST))
    assert too_wide == {}, too_wide
    context.close()


@pytest.mark.browser
def test_the_phone_navigation_opens_and_reaches_every_section(phone_world, live_server, browser, artifacts):
    owner, _ = phone_world
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    page.set_default_timeout(10_000)
    sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)
    menu = page.get_by_role("button", name="Menu")
    expect(menu).to_be_visible()
    expect(page.get_by_role("link", name="Activity")).to_be_hidden()
    menu.click()
    main_nav = page.get_by_role("navigation", name="Main")
    # The Inbox link carries its count ("Inbox 1 waiting for you"): the card made above waits.
    expect(main_nav.get_by_role("link", name=re.compile(r"^Inbox 1 waiting for you$"))).to_be_visible()
    for name in ("Tasks", "Agents", "Apps", "Activity", "Members"):
        expect(main_nav.get_by_role("link", name=name, exact=True)).to_be_visible()
    page.screenshot(path=str(artifacts / "phone-menu-open.png"))
    page.get_by_role("link", name="Activity", exact=True).click()
    page.wait_for_url(f"{live_server}/activity")
    assert page.evaluate(OVERFLOW) <= 0
    context.close()
