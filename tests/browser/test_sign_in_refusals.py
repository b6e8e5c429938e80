"""A refused sign-in in Chromium at 1366 and 390 px: wrong credentials mark both fields invalid; a throttled sign-in
(429) says why and keeps the focus on the email field without blaming what was typed."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.factories import DEFAULT_PASSWORD


@pytest.mark.browser
@pytest.mark.parametrize("width", [1366, 390])
def test_only_wrong_credentials_mark_the_sign_in_fields(app, make, live_server, browser, artifacts, width):
    company = make.company("Acme")
    person = make.member(company, "member", user=make.user(f"kim{width}@example.com", "Kim Member"))
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    for attempt in range(5):
        page.goto(f"{live_server}/login")
        page.fill("#email", person.email)
        page.fill("#password", f"wrong {attempt}")
        page.click("button[type=submit]")
        expect(page.get_by_role("alert")).to_have_text("Invalid email or password.")
        expect(page.locator("#email")).to_have_attribute("aria-invalid", "true")
        expect(page.locator("#password")).to_have_attribute("aria-invalid", "true")

    page.goto(f"{live_server}/login")
    page.fill("#email", person.email)
    page.fill("#password", DEFAULT_PASSWORD)
    with page.expect_response(f"{live_server}/login") as answer:
        page.click("button[type=submit]")
    assert answer.value.status == 429
    expect(page.get_by_role("alert")).to_contain_text("Too many failed sign-in attempts.")
    for field in ("#email", "#password"):
        expect(page.locator(field)).not_to_have_attribute("aria-invalid", "true")
        expect(page.locator(field)).to_have_attribute("aria-describedby", "login-error")
    expect(page.locator("#email")).to_be_focused()
    page.screenshot(path=str(artifacts / f"sign-in-throttled-{width}.png"))
    context.close()
