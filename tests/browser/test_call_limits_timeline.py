"""Call limits and the run's decision timeline in Chromium (issue 28 items 3 and 5): a person sets a per-run limit on
the connection's Permissions page (htmx), an agent runs into it through the gateway (the real notes MCP peer), and
the page counts the refusal; the run's page lists the gateway's decisions in order."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in_through_the_form
from tests.doors import refusal_fields, rpc
from tests.factories import DEFAULT_PASSWORD
from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway.test_gateway import connect


@pytest.mark.browser
def test_a_limit_set_on_the_page_refuses_and_the_run_page_shows_it(
    app, db, make, client, providers, live_server, page, artifacts
):
    world = make.task_run(client=client)
    notes = connect(world, "github", NOTES_KEY, name="Notes 1")
    sign_in_through_the_form(page, live_server, world.owner.email, DEFAULT_PASSWORD)

    page.goto(f"{live_server}/apps/{notes['id']}/permissions")
    section = page.locator("#connection-call-limits")
    expect(section).to_contain_text("No calls were refused by a limit in the last 24 hours.")
    per_run = section.get_by_label("Per run: calls per minute")
    expect(per_run).to_have_value("60")  # the default
    per_run.fill("2")
    section.get_by_role("button", name="Save call limits").click()
    expect(section.get_by_role("status")).to_have_text("Call limits saved.")
    expect(page.locator("#connection-call-limits").get_by_label("Per run: calls per minute")).to_have_value(
        "2"
    )

    def call(note_id):
        arguments = {"note_id": note_id}
        answer = rpc(
            world.client, world.token, "tools/call", {"name": "notes-1__get_note", "arguments": arguments}
        )
        return answer.json["result"]

    assert call("n1")["isError"] is False and call("n2")["isError"] is False
    refused = refusal_fields(call("n1"))
    assert refused["reasonCode"] == "rate_limited"

    page.reload()
    expect(page.locator("#call-limit-refusals")).to_contain_text("Refused by a limit since")
    expect(page.locator("#call-limit-refusals strong")).to_have_text("1")
    page.locator("#connection-call-limits").screenshot(path=str(artifacts / "connection-call-limits.png"))

    page.goto(f"{live_server}/runs/{world.run.id}")
    rows = page.locator("table.gateway-decisions tbody tr")
    expect(rows).to_have_count(3)
    expect(rows.nth(0)).to_contain_text("Allowed by policy")
    expect(rows.nth(0)).to_contain_text("notes-1__get_note")
    expect(rows.nth(0)).to_contain_text("ok")
    expect(rows.nth(2)).to_contain_text(
        f"Refused by a rate limit (retry in {refused['retryAfterSeconds']} s)"
    )
    expect(page.get_by_role("heading", name="Gateway decisions")).to_be_visible()
    page.screenshot(path=str(artifacts / "run-gateway-decisions.png"), full_page=True)
