"""After a refused key on the Apps page, in Chromium at 1366 and 390 px: the kept setup still offers every method and
identity, switching the method keeps that setup, and the next attempt changes the same draft (the setup service's
`change_draft_choices`), never a second one."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from sqlalchemy import select

from app.models import ToolConnection
from tests.browser.conftest import sign_in_through_the_form
from tests.browser.test_accessibility import BLOCKING, axe_violations
from tests.factories import DEFAULT_PASSWORD


@pytest.fixture
def linear_refuses_keys(app, honcho_server, monkeypatch):
    """Linear's API-key method reaches the Honcho peer, which refuses every key but its own."""
    monkeypatch.setitem(app.config, "PROVIDER_SERVER_URLS", {"linear": honcho_server.url})
    return honcho_server


@pytest.mark.browser
@pytest.mark.parametrize("width", [1366, 390])
def test_the_method_and_identity_change_in_place_after_a_refused_key(
    app, db, make, linear_refuses_keys, live_server, browser, artifacts, width
):
    company = make.company("Acme")
    owner = make.member(company, "owner", user=make.user(name="Dana Owner"))
    make.agent(company, "Builder")
    context = browser.new_context(viewport={"width": width, "height": 900})
    page = context.new_page()
    page.set_default_timeout(10_000)
    sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)
    page.goto(f"{live_server}/apps/linear/connect")
    flow = page.locator("#setup-flow")
    flow.get_by_role("radio", name="API key").check()
    expect(flow.get_by_role("textbox", name="API key")).to_be_visible()
    flow.get_by_role("textbox", name="API key").fill("not-the-key")
    flow.get_by_role("button", name="Connect", exact=True).click()
    expect(flow.locator("#setup-flow-refusal")).to_contain_text("Linear refused the credentials.")
    expect(flow.locator("#setup-flow-kept")).to_be_visible()
    draft_id = flow.locator("input[name=draft_id]").get_attribute("value")

    # The method switches in place and the kept setup goes along.
    flow.get_by_role("radio", name="Sign in with Linear").check()
    expect(flow.get_by_role("button", name="Sign in with Linear")).to_be_visible()
    expect(flow.locator("input[name=draft_id]")).to_have_value(draft_id)
    expect(flow.get_by_role("radio", name="Sign in with Linear")).to_be_focused()
    page.screenshot(path=str(artifacts / f"change-method-after-failure-{width}.png"))
    assert [v["id"] for v in axe_violations(page) if v["impact"] in BLOCKING] == []

    # Back to a key, now for the organization: the same draft follows both choices.
    flow.get_by_role("radio", name="API key").check()
    expect(flow.locator("input[name=draft_id]")).to_have_value(draft_id)
    flow.get_by_role("radio", name="Organization").check()
    flow.get_by_role("textbox", name="API key").fill("still-not-the-key")
    flow.get_by_role("button", name="Connect", exact=True).click()
    expect(flow.locator("#setup-flow-refusal")).to_contain_text("Linear refused the credentials.")
    expect(flow.get_by_role("radio", name="Organization")).to_be_checked()
    db.session.expire_all()
    [draft] = db.session.scalars(select(ToolConnection)).all()
    assert (str(draft.id), draft.status, draft.method_key, draft.config["identity"]) == (
        draft_id,
        "draft",
        "mcp-key",
        "organization",
    )
    context.close()
