"""axe-core on open dialogs and on the states a page reaches after a click, not only on pages as first loaded (issue
16): the card's connect dialog with an API-key method and with an OAuth method (before and while its sign-in window
is open), the dialog after a refused key,
the delete and disconnect confirmations, the instructions editor while editing (and over the limit), the webhooks
page with a rotated secret and the webhook editor, and the phone layout with the navigation open. No serious or
critical violation in any of them; every violation is printed, whatever its impact."""

from __future__ import annotations

import json

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in_through_the_form
from tests.browser.test_accessibility import AXE, BLOCKING, DESKTOP, axe_violations
from tests.browser.test_phone_layout import PHONE
from tests.doors import request_service
from tests.factories import DEFAULT_PASSWORD
from tests.services.runtime import test_runtime_rest
from tests.services.runtime.test_runtime_rest import connect, honcho_body

providers = test_runtime_rest.providers  # honcho -> the real MCP peer


@pytest.fixture
def dialog_world(app, db, make, providers, live_server, oauth_mcp, monkeypatch):
    """Two tasks whose agents ask for Honcho (API key) and Notion (OAuth, the local OpenID Provider's MCP peer), and
    a connected Honcho to delete."""
    monkeypatch.setitem(app.config, "PUBLIC_BASE_URL", live_server)
    monkeypatch.setitem(
        app.config, "PROVIDER_SERVER_URLS", {**app.config["PROVIDER_SERVER_URLS"], "notion": oauth_mcp.url}
    )
    monkeypatch.setitem(app.config, "OAUTH_CLIENTS", {})
    company = make.company("Acme")
    owner = make.member(company, "owner", user=make.user(name="Dana Owner"))
    cards = {}
    for service in ("honcho", "notion"):
        agent = make.agent(company, f"Builder for {service}")
        issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
        _, token = make.run(agent, issue)
        answer = request_service(app.test_client(), token, service).json
        assert answer["state"] == "needs_user_action", answer
        cards[service] = (issue.id, answer["interactionId"])
    connection = connect(app, owner, company, honcho_body())
    return owner, cards, connection["id"]


class Audit:
    """Runs axe on the page as it is now and keeps what blocks, by the state's name."""

    def __init__(self, page, width: int):
        self.page = page
        self.width = width
        self.blocking: dict[str, list[str]] = {}
        self.states: list[str] = []

    def __call__(self, state: str) -> None:
        self.states.append(state)
        for violation in axe_violations(self.page):
            print(f"{self.width}px {state}: {json.dumps(violation, indent=1)}")
            if violation["impact"] in BLOCKING:
                self.blocking.setdefault(state, []).append(f"{violation['id']} ({violation['impact']})")


def open_card_dialog(page, base: str, issue_id, interaction_id: str):
    page.goto(f"{base}/tasks/{issue_id}")
    page.locator(f"#intent-card-{interaction_id}").get_by_role("button", name="Connect", exact=True).click()
    dialog = page.locator(f"#intent-dialog-{interaction_id}")
    expect(dialog.locator("#setup-flow")).to_be_visible()
    return dialog


@pytest.mark.browser
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_no_serious_or_critical_axe_violation_in_dialogs_and_states(
    dialog_world, live_server, browser, viewport, artifacts
):
    if not AXE.exists():
        pytest.skip(f"{AXE} is missing: run `make peers`")
    owner, cards, connection_id = dialog_world
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(10_000)
    audit = Audit(page, viewport["width"])
    sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)

    dialog = open_card_dialog(page, live_server, *cards["honcho"])
    audit("card dialog, API key")
    dialog.get_by_label("API key").fill("not-the-key")
    dialog.get_by_label("Honcho workspace").fill("team")
    dialog.get_by_role("button", name="Connect", exact=True).click()
    expect(dialog.locator("#setup-flow-refusal")).to_be_focused()
    audit("card dialog, refused key")
    page.screenshot(path=str(artifacts / f"axe-refused-key-{viewport['width']}.png"))

    dialog = open_card_dialog(page, live_server, *cards["notion"])
    expect(dialog.locator("#setup-flow").get_by_role("button", name="Sign in with Notion")).to_be_visible()
    audit("card dialog, OAuth")
    with page.expect_popup() as popup_info:
        dialog.locator("#setup-flow").get_by_role("button", name="Sign in with Notion").click()
    expect(dialog.get_by_text("The sign-in window is open")).to_be_visible()
    audit("card dialog, OAuth sign-in window open")
    popup_info.value.close()

    page.goto(f"{live_server}/apps/{connection_id}/delete")
    expect(page.get_by_role("heading", name="Delete Honcho?", level=1)).to_be_visible()
    audit("delete confirmation")
    page.goto(f"{live_server}/apps/{connection_id}/disconnect")
    expect(page.get_by_role("heading", name="Disconnect Honcho?", level=1)).to_be_visible()
    audit("disconnect confirmation")

    page.goto(f"{live_server}/apps/{connection_id}/permissions")
    editor = page.locator("#agent-instructions-editor")
    editor.get_by_role("button", name="Edit instructions").click()
    textarea = editor.locator("textarea#agent-instructions-text")
    expect(textarea).to_be_focused()
    audit("instructions editor, editing")
    textarea.fill("x" * 2001)
    expect(editor.get_by_text("2,001 / 2,000 characters")).to_be_visible()
    audit("instructions editor, over the limit")

    page.goto(f"{live_server}/settings/webhooks")
    page.get_by_label("Endpoint URL").fill("http://127.0.0.1:9/switchboard-events")
    page.get_by_role("button", name="Add webhook").click()
    expect(page.locator("#new-webhook-secret")).to_be_visible()
    audit("webhooks, new secret shown")
    page.get_by_role("button", name="Rotate signing secret").click()
    expect(page.get_by_text("The old one no longer verifies", exact=False)).to_be_visible()
    audit("webhooks, rotated secret shown")
    page.screenshot(
        path=str(artifacts / f"webhooks-rotated-{viewport['width']}.png")
    )  # docs/screenshots/11-webhooks.png
    page.get_by_role("button", name="Disable").click()
    expect(page.get_by_text("The webhook is disabled.", exact=False)).to_be_visible()
    audit("webhooks, disabled")
    page.get_by_role("button", name="Edit the webhook to").click()
    expect(page.get_by_role("heading", name="Edit webhook", level=1)).to_be_visible()
    audit("webhook editor")

    if viewport is PHONE:
        page.goto(f"{live_server}/tasks")
        page.get_by_role("button", name="Menu").click()
        expect(
            page.get_by_role("navigation", name="Main").get_by_role("link", name="Activity")
        ).to_be_visible()
        audit("phone navigation open")
    context.close()
    assert audit.blocking == {}, audit.blocking
    assert len(audit.states) == (13 if viewport is PHONE else 12)
