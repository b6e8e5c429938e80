"""Where the keyboard focus lands after each swap (issue 27 item 4), at 1366 and 390 px: never on <body>. A refused
sign-in focuses its field, which the error describes; a posted comment leaves the focus in the comment box with
"Comment posted."; switching the dialog's method by keyboard keeps the focus on the chosen method; browser Back
closes an open card dialog and stays on the task; Save agent access, the instructions editor (switch, save, reset)
and Disable/Enable focus their status; the phone menu closes on Escape."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in_through_the_form, wait_until_true
from tests.browser.test_accessibility import DESKTOP
from tests.browser.test_dialog_accessibility import dialog_world, open_card_dialog  # noqa: F401
from tests.browser.test_phone_layout import PHONE
from tests.doors import request_service
from tests.factories import DEFAULT_PASSWORD
from tests.services.runtime import test_runtime_rest

providers = test_runtime_rest.providers  # honcho -> the real MCP peer

ACTIVE = "document.activeElement"
# The history entry an open dialog adds (static/js/intent_card.js) is gone, and the page's own state is back.
NO_DIALOG_ENTRY = (
    "!(history.state && (history.state.switchboardDialog || history.state.switchboardDialogBase))"
)


def focused(page) -> dict:
    """What has the focus: its tag, id, name, value and text (for the assertion messages too)."""
    return page.evaluate(
        f"({{tag: {ACTIVE}.tagName, id: {ACTIVE}.id, name: {ACTIVE}.getAttribute('name'), "
        f"value: {ACTIVE}.value === undefined ? null : {ACTIVE}.value, text: {ACTIVE}.textContent.trim()}})"
    )


def mark_setup_flow(page) -> str:
    """Marks the setup flow now shown; returns the expression that is true once another one has replaced it."""
    page.evaluate("document.getElementById('setup-flow').dataset.beforeSwap = 'yes'")
    return (
        "!!document.getElementById('setup-flow') && !document.getElementById('setup-flow').dataset.beforeSwap"
    )


@pytest.fixture
def linear_card(app, make, dialog_world):  # noqa: F811
    """A third card, for Linear: an app with two ways to connect (sign-in or API key)."""
    owner, _cards, _connection_id = dialog_world
    company = owner.memberships[0].company
    agent = make.agent(company, "Builder for linear")
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    _, token = make.run(agent, issue)
    answer = request_service(app.test_client(), token, "linear").json
    assert answer["state"] == "needs_user_action", answer
    return issue.id, answer["interactionId"]


@pytest.mark.browser
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_focus_lands_in_the_updated_region_after_each_swap(
    dialog_world,  # noqa: F811
    linear_card,
    live_server,
    browser,
    viewport,
    artifacts,
):
    owner, cards, connection_id = dialog_world
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(10_000)
    console_errors: list[str] = []
    page.on("console", lambda m: console_errors.append(m.text) if m.type == "error" else None)

    # A refused sign-in: the error describes both fields and the email field has the focus.
    page.goto(f"{live_server}/login")
    page.fill("#email", owner.email)
    page.fill("#password", "not-the-password")
    page.click("button[type=submit]")
    expect(page.get_by_role("alert")).to_have_text("Invalid email or password.")
    expect(page.locator("#email")).to_be_focused()
    expect(page.locator("#email")).to_have_attribute("aria-describedby", "login-error")
    expect(page.locator("#email")).to_have_attribute("aria-invalid", "true")
    expect(page.locator("#password")).to_have_attribute("aria-describedby", "login-error")
    sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)

    # A comment: the focus stays in the comment box, which says it was posted.
    issue_id, interaction_id = cards["honcho"]
    page.goto(f"{live_server}/tasks/{issue_id}")
    page.get_by_label("Add a comment").fill("Looks good to me")
    page.get_by_role("button", name="Comment", exact=True).click()
    expect(page.locator("#thread-items").get_by_text("Looks good to me")).to_be_visible()
    expect(page.locator("#comment-body")).to_be_focused()
    expect(page.locator("#comment-posted")).to_have_text("Comment posted.")
    expect(page.locator("#comment-body")).to_have_attribute("aria-describedby", "comment-posted")

    # Back with the dialog open closes it and stays on the task; the card's button has the focus again.
    dialog = open_card_dialog(page, live_server, issue_id, interaction_id)
    task_url = page.url
    page.go_back()
    expect(dialog).not_to_be_visible()
    assert page.url == task_url
    expect(
        page.locator(f"#intent-card-{interaction_id}").get_by_role("button", name="Connect", exact=True)
    ).to_be_focused()
    # Closed with its own Close button, the dialog leaves no extra history entry: Back leaves the task.
    dialog = open_card_dialog(page, live_server, issue_id, interaction_id)
    dialog.get_by_role("button", name="Close", exact=True).click()
    expect(dialog).not_to_be_visible()
    wait_until_true(page, NO_DIALOG_ENTRY)  # the added entry is taken off asynchronously (history.back)
    page.go_back()
    page.wait_for_url(lambda url: url != task_url)

    # Switching the method by keyboard inside the dialog: the chosen method keeps the focus; no console error.
    console_errors.clear()
    dialog = open_card_dialog(page, live_server, *linear_card)
    methods = dialog.get_by_role("group", name="How to connect").get_by_role("radio")
    expect(methods).to_have_count(2)
    methods.first.focus()
    first_value = methods.first.get_attribute("value")
    swapped = mark_setup_flow(page)
    page.keyboard.press("ArrowDown")
    wait_until_true(page, swapped)
    second = dialog.locator("input[name=method_key]:checked")
    expect(second).not_to_have_attribute("value", first_value)
    second_value = second.get_attribute("value")
    expect(dialog.locator(f"input[name=method_key][value='{second_value}']")).to_be_focused()
    swapped = mark_setup_flow(page)
    page.keyboard.press("ArrowUp")
    wait_until_true(page, swapped)
    expect(dialog.locator(f"input[name=method_key][value='{first_value}']")).to_be_checked()
    expect(dialog.locator(f"input[name=method_key][value='{first_value}']")).to_be_focused()
    assert console_errors == [], console_errors
    page.keyboard.press("Escape")
    expect(dialog).not_to_be_visible()
    wait_until_true(page, NO_DIALOG_ENTRY)

    # Permissions: Save agent access focuses its status.
    page.goto(f"{live_server}/apps/{connection_id}/permissions")
    access = page.locator("#agent-access")
    access.get_by_role("button", name="Save agent access").click()
    expect(access.get_by_role("status")).to_have_text("Agent access saved.")
    expect(access.get_by_role("status")).to_be_focused()

    # The instructions editor: the switch keeps the focus; Save instructions and Reset to default focus the status.
    editor = page.locator("#agent-instructions-editor")
    switch = editor.get_by_role("switch", name="Tell agents to use Honcho")
    switch.press("Space")
    expect(editor.locator("#agent-instructions-off")).to_be_visible()
    expect(editor.get_by_role("switch", name="Tell agents to use Honcho")).to_be_focused()
    editor.get_by_role("switch", name="Tell agents to use Honcho").press("Space")
    expect(editor.locator("#agent-instructions-off")).to_have_count(0)
    expect(editor.get_by_role("switch", name="Tell agents to use Honcho")).to_be_focused()
    editor.get_by_role("button", name="Edit instructions").click()
    # htmx attaches the textarea's listeners in its settle step, 20 ms after the swap; the editor focuses the
    # textarea once that is done, so typing before then would be lost (as it would for a person).
    text = editor.locator("textarea#agent-instructions-text")
    expect(text).to_be_focused()
    text.fill("Use Honcho for the team's memory only.")
    editor.get_by_role("button", name="Save instructions").click()
    status = editor.get_by_role("status")
    expect(status).to_be_visible()
    expect(status).to_be_focused()
    expect(status).to_have_text("Instructions saved.")
    editor.get_by_role("button", name="Reset to default").click()
    reset = editor.locator("#agent-instructions-reset")
    expect(reset).to_have_text(
        "The default instructions are back in the editor. Save instructions to keep them."
    )
    expect(reset).to_be_focused()

    # Disable and Enable answer with the whole page: its message has the focus.
    page.get_by_role("button", name="Disable").click()
    message = page.locator("#flash .alert")
    expect(message).to_contain_text("is disabled")
    expect(message).to_be_focused()
    page.get_by_role("button", name="Enable").click()
    expect(message).to_contain_text("is enabled again")
    expect(message).to_be_focused()
    page.screenshot(path=str(artifacts / f"focus-after-enable-{viewport['width']}.png"))

    if viewport is PHONE:
        menu = page.get_by_role("button", name="Menu")
        menu.click()
        links = page.get_by_role("navigation", name="Main").get_by_role("link", name="Activity")
        expect(links).to_be_visible()
        links.focus()
        page.keyboard.press("Escape")
        expect(links).not_to_be_visible()
        expect(menu).to_have_attribute("aria-expanded", "false")
        expect(menu).to_be_focused()
    assert focused(page)["tag"] != "BODY"
    context.close()


def inside_scroller(page, selector: str) -> bool:
    """Whether the element is wholly inside the visible part of the dialog's scrolling body."""
    return page.evaluate(
        """([selector]) => {
            const element = document.querySelector(selector);
            const scroller = element.closest('dialog > article');
            const box = element.getBoundingClientRect(), view = scroller.getBoundingClientRect();
            return box.height > 0 && box.top >= view.top - 1 && box.bottom <= view.bottom + 1
                && box.bottom <= window.innerHeight + 1;
        }""",
        [selector],
    )


@pytest.mark.browser
@pytest.mark.parametrize("viewport", [DESKTOP, PHONE], ids=["desktop", "phone"])
def test_the_dialog_keeps_close_connect_and_not_now_in_view(
    dialog_world,  # noqa: F811
    live_server,
    browser,
    viewport,
    artifacts,
):
    owner, cards, _connection_id = dialog_world
    context = browser.new_context(viewport={**viewport, "height": 600})
    page = context.new_page()
    page.set_default_timeout(10_000)
    sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)
    issue_id, interaction_id = cards["honcho"]
    dialog = open_card_dialog(page, live_server, issue_id, interaction_id)
    scroller = f"#intent-dialog-{interaction_id}-body"
    close = f"#intent-dialog-{interaction_id} .connection-dialog-close"
    connect = f"#intent-dialog-{interaction_id} .setup-flow-actions button:not([form])"
    not_now = f"#intent-dialog-{interaction_id} .setup-flow-actions button[form]"
    expect(dialog.locator(".setup-flow-actions").get_by_role("button", name="Not now")).to_be_visible()
    # The dialog is taller than the screen (else there is nothing to keep in view).
    assert page.evaluate(
        f"document.querySelector('{scroller}').scrollHeight > document.querySelector('{scroller}').clientHeight"
    )
    page.screenshot(path=str(artifacts / f"dialog-sticky-actions-{viewport['width']}.png"))
    for position in ("0", f"document.querySelector('{scroller}').scrollHeight"):
        page.evaluate(f"document.querySelector('{scroller}').scrollTop = {position}")
        assert inside_scroller(page, close), position
        assert inside_scroller(page, connect), position
        assert inside_scroller(page, not_now), position

    # All agents or Selected agents: with All chosen no per-agent box is shown (none half-checked), only what All
    # means; the agent that asked is named either way.
    audience = dialog.get_by_role("group", name="Which agents can use it")
    boxes = audience.get_by_role("group", name="Selected agents")
    all_note = audience.get_by_text("Every agent in the company, including agents added later.")
    locked = audience.get_by_text("Builder for honcho asked for this connection, so it always gets access.")
    audience.get_by_role("radio", name="All agents").check()
    expect(boxes).to_be_hidden()
    expect(all_note).to_be_visible()
    expect(locked).to_be_visible()
    audience.get_by_role("radio", name="Selected agents").check()
    expect(boxes).to_be_visible()
    expect(boxes.get_by_role("checkbox", name="Builder for honcho")).to_be_checked()
    expect(boxes.get_by_role("checkbox", name="Builder for honcho")).to_be_disabled()
    expect(all_note).to_be_hidden()
    expect(locked).to_be_visible()

    # Not now inside the dialog declines the card: the dialog is gone and the answered card has the focus.
    dialog.get_by_role("button", name="Not now").click()
    card = page.locator(f"#intent-card-{interaction_id}")
    expect(card.get_by_role("status")).to_be_visible()
    expect(dialog).to_have_count(0)
    expect(card).to_be_focused()
    wait_until_true(page, NO_DIALOG_ENTRY)
    context.close()
