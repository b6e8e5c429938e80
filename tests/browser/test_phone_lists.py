"""Issue 27 item 5 ("Phone and orientation") in Chromium at 390 and 1366 px: the Tasks, Agents, Activity and Members
tables become readable lists on a phone (nothing scrolls sideways inside them), the Menu button and Home show a
waiting card, task titles are links, and a fresh company's Home orients the person until an app is connected."""

from __future__ import annotations

import re

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in_through_the_form
from tests.browser.test_phone_layout import PHONE, phone_world, providers  # noqa: F401 (fixtures)
from tests.factories import DEFAULT_PASSWORD

DESKTOP = {"width": 1366, "height": 900}
# Every table on the page, with how far its content reaches past its own box and past the screen.
TABLE_OVERFLOW = """[...document.querySelectorAll('main table')].map(t => ({
  inside: t.scrollWidth - t.clientWidth,
  screen: Math.max(0, ...[...t.querySelectorAll('*')].map(e => Math.round(e.getBoundingClientRect().right))) - window.innerWidth,
}))"""


@pytest.mark.browser
def test_the_board_tables_are_lists_on_a_phone(phone_world, live_server, browser, artifacts):  # noqa: F811
    owner, _ = phone_world
    context = browser.new_context(viewport=PHONE)
    page = context.new_page()
    page.set_default_timeout(10_000)
    sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)
    for path in ("/tasks", "/agents", "/activity", "/members"):
        page.goto(f"{live_server}{path}")
        page.screenshot(path=str(artifacts / f"phone-list{path.replace('/', '-')}.png"), full_page=True)
        tables = page.evaluate(TABLE_OVERFLOW)
        assert tables, path
        assert all(t["inside"] <= 0 and t["screen"] <= 0 for t in tables), (path, tables)
        # The column names are hidden off screen; each cell carries its own label instead.
        assert (
            page.evaluate("getComputedStyle(document.querySelector('main tbody tr')).display") == "block"
        ), path
    # The Members role select is as wide as a readable select, beside its Save button.
    page.goto(f"{live_server}/members")
    select = page.get_by_label(re.compile("^Role of "))
    assert select.bounding_box()["width"] >= 150
    # The task title is a link to its task, and reads whole.
    page.goto(f"{live_server}/tasks")
    title = page.get_by_role(
        "link", name="Write the launch notes for the quarterly release in Notion and Honcho", exact=True
    )
    expect(title).to_be_visible()
    title.click()
    page.wait_for_url(re.compile(r"/tasks/[0-9a-f-]+$"))
    context.close()


@pytest.mark.browser
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_waiting_card_shows_on_home_and_on_the_menu(phone_world, live_server, browser, viewport):  # noqa: F811
    owner, _ = phone_world
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(10_000)
    sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)
    page.goto(f"{live_server}/")
    waiting = page.locator(".home-waiting")
    expect(waiting).to_be_visible()
    expect(waiting).to_contain_text("1 card is waiting for you")
    expect(waiting.get_by_role("button", name="Open the Inbox")).to_be_visible()
    menu = page.get_by_role("button", name="Menu 1 waiting for you", exact=True)
    if viewport is PHONE:
        expect(menu).to_be_visible()
        expect(menu.locator(".inbox-count")).to_have_text("1")
        expect(page.get_by_role("link", name=re.compile("^Inbox"))).to_be_hidden()
    else:
        expect(menu).to_be_hidden()  # the links are in view, the Inbox link carries the count
        expect(page.get_by_role("link", name="Inbox 1 waiting for you", exact=True)).to_be_visible()
    waiting.get_by_role("button", name="Open the Inbox").click()
    page.wait_for_url(f"{live_server}/inbox")
    context.close()


@pytest.mark.browser
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_a_fresh_company_is_oriented_until_an_app_is_connected(app, db, make, live_server, browser, viewport):
    company = make.company("Fresh Start")
    owner = make.member(company, "owner")
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(10_000)
    sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)
    page.goto(f"{live_server}/")
    start = page.get_by_role("article", name="Start here")
    expect(start).to_be_visible()
    expect(start).to_contain_text("Switchboard lets your AI agents use apps")
    assert page.evaluate("document.documentElement.scrollWidth - window.innerWidth") <= 0
    expect(page.locator(".home-waiting")).to_have_count(0)
    start.get_by_role("link", name="Connect an app").click()
    page.wait_for_url(f"{live_server}/apps")
    make.connection(company)
    page.goto(f"{live_server}/")
    expect(page.get_by_role("heading", name="Fresh Start", level=1)).to_be_visible()
    expect(page.get_by_role("article", name="Start here")).to_have_count(0)
    context.close()
