"""The explainer in Chromium: "why can't Builder use it?" on the connection's page (with a tool, and the dry run)
and on the agent's page, answered in place by htmx."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from app.services.gateway.arguments import canonical_digest
from tests.browser.conftest import sign_in_through_the_form
from tests.factories import DEFAULT_PASSWORD


@pytest.mark.browser
def test_why_cant_builder_use_it(db, make, live_server, page):
    base = live_server
    company = make.company("Acme")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Builder")
    notion = make.connection(
        company, name="Notion", grants=[("organization", None)], tools={"search": "allow", "drop": "block"}
    )
    make.connection(
        company, name="Hidden", grants=[("organization", None)], installed=False, tools={"a": None}
    )
    db.session.commit()
    sign_in_through_the_form(page, base, owner.email, DEFAULT_PASSWORD)

    # The connection's page: ready, then a blocked tool names the policy check.
    page.goto(f"{base}/apps/{notion.id}/permissions")
    form = page.locator("#explain-form")
    form.get_by_label("Agent").select_option(label="Builder")
    form.get_by_role("button", name="Explain").click()
    answer = page.locator("#access-explanation [role=status]")
    expect(answer).to_have_text("Ready: Builder can use Notion.")
    form.get_by_label("Tool (optional)").select_option("drop")
    form.get_by_role("button", name="Explain").click()
    expect(answer).to_have_text(
        "Builder can't use drop on Notion: An administrator blocked drop for agents on this connection."
    )
    expect(page.locator('#access-explanation li[data-check="policy"]')).to_contain_text("fails first")
    assert page.url.endswith("/permissions")  # answered in place

    # The dry run: the provider is not called; the answer says what would happen.
    dry = page.locator("#dry-run-form")
    dry.get_by_label("Tool").select_option("search")
    dry.get_by_label("Arguments (a JSON object)").fill('{"query": "roadmap"}')
    dry.get_by_role("button", name="Dry run").click()
    expect(page.locator("#dry-run-result [data-decision]")).to_have_attribute("data-decision", "allowed")
    expect(page.locator("#dry-run-result [data-digest]")).to_have_text(canonical_digest({"query": "roadmap"}))

    # The agent's page: a connection it is not given names the audience check.
    page.goto(f"{base}/agents/{agent.id}/instructions")
    agent_form = page.locator("#agent-explain-form")
    agent_form.get_by_label("Connection").select_option(label="Hidden")
    agent_form.get_by_role("button", name="Explain").click()
    expect(page.locator("#access-explanation [role=status]")).to_have_text(
        "Builder can't use Hidden: The connection is not installed for this agent: add the agent (or all agents) "
        "to its agent access."
    )
    expect(page.locator('#access-explanation li[data-check="audience"]')).to_have_attribute(
        "data-status", "fail"
    )
