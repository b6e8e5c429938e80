"""The Members page in Chromium: a refused role change puts the select back to the role that still holds."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in_through_the_form
from tests.factories import DEFAULT_PASSWORD


@pytest.fixture
def lone_owner(make):
    company = make.company("Acme")
    return make.member(company, "owner", user=make.user(name="Dana Owner"))


@pytest.mark.browser
def test_a_refused_role_change_restores_the_select(lone_owner, live_server, page):
    sign_in_through_the_form(page, live_server, lone_owner.email, DEFAULT_PASSWORD)
    page.goto(f"{live_server}/members")
    role = page.get_by_label("Role of Dana Owner")
    expect(role).to_have_value("owner")
    role.select_option("viewer")
    role.locator("xpath=ancestor::form").get_by_role("button", name="Save").click()
    # The last owner cannot step down: the reason shows and the select shows the saved role again.
    expect(page.locator("#flash [role=alert]")).to_contain_text("A company needs at least one active owner")
    expect(role).to_have_value("owner")
