"""The whole journey in Chromium, against real peers and the real worker (no mocks of our code).

The demo owner signs in, connects Honcho by API key on the Apps page (the required workspace is asked for inline),
shapes its agent instructions on the Permissions page (toggle, edit, reset, and a failed save that keeps the draft).
The worker runs the example process agent on its in-progress task: it searches for Notion and asks for it, so a
connection card appears in the thread; the demo member sees only who the card waits for. The owner connects Notion
through OAuth in a popup against the local OpenID Provider; the card turns connected, the continuation runs in a fresh
session with Honcho's instruction block and calls a Notion tool through the gateway; the activity log shows it all.

Screenshots go to `test-artifacts/journey/` (1280x800); the best of them are kept in `docs/screenshots/`.
"""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
from pathlib import Path

import pytest
from playwright.sync_api import TimeoutError as PlaywrightTimeoutError
from playwright.sync_api import expect
from sqlalchemy import select

from app.models import ActivityLog, ConnectionGrant, HeartbeatRun, ThreadInteraction, ToolConnection
from app.models.run_logs import RunLog
from app.services.connections.endpoint import stored_secrets
from app.services.demo import load_demo
from app.workers.loop import run_worker_forever
from tests.browser.conftest import ARTIFACTS, CHROMIUM, CHROMIUM_ARGS, wait_until_true, watch_csp
from tests.peers.mcp_servers import HONCHO_KEY

VIEWPORT = {"width": 1280, "height": 800}
# Content-Security-Policy violations in the journey's pages (it opens its own Chromium): none is allowed.
CSP_VIOLATIONS: list[str] = []
WORKSPACE = "acme-launch"
CUSTOM_TEXT = "Recall the launch decisions from the acme-launch workspace before drafting anything."
OFF_NOTICE = "Agents can still use this connection’s tools, but won’t receive these instructions."
WAIT_SECONDS = 90.0  # bound for the worker: a run starts a Python process and talks to three servers


@pytest.fixture
def journey_config(app, live_server, honcho_server, oidc, oauth_mcp, monkeypatch):
    """The catalog points at the live peers, and the app knows its public URL (agents and OAuth callbacks)."""
    monkeypatch.setitem(app.config, "PUBLIC_BASE_URL", live_server)
    monkeypatch.setitem(
        app.config, "PROVIDER_SERVER_URLS", {"honcho": honcho_server.url, "notion": oauth_mcp.url}
    )
    monkeypatch.setitem(app.config, "OAUTH_CLIENTS", {})
    return live_server


@pytest.fixture
def worker(app, db, journey_config):
    """The worker loop (runs and continuation deliveries) in a thread of this test, stopped before tables empty."""
    stop = threading.Event()
    thread = threading.Thread(
        target=run_worker_forever,
        args=(app, 0.1),
        kwargs={"stop": stop},
        name="journey-worker",
        daemon=True,
    )
    started = False

    def start() -> None:
        nonlocal started
        if not started:
            started = True
            thread.start()

    yield start
    stop.set()
    if started:
        thread.join(timeout=150)
        assert not thread.is_alive(), "the worker did not stop"


def eventually(db, fetch, what: str, timeout: float = WAIT_SECONDS):
    """Poll the database (a fresh transaction each time) until `fetch()` is truthy; bounded."""
    deadline = time.monotonic() + timeout
    while True:
        db.session.rollback()
        value = fetch()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


class Journey:
    """Screenshots named in order, and every page's HTML kept to check that no secret was ever rendered."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.count = 0
        self.html: list[str] = []

    def shot(self, page, name: str, *, full_page: bool = False) -> None:
        # Logos swapped in by htmx load asynchronously: wait until every image has loaded (or failed).
        wait_until_true(page, "Array.from(document.images).every((image) => image.complete)")
        self.count += 1
        page.screenshot(path=str(self.directory / f"{self.count:02d}-{name}.png"), full_page=full_page)
        self.keep(page)

    def keep(self, page) -> None:
        self.html.append(page.content())


def runs_of(db, agent_id) -> list[HeartbeatRun]:
    return list(
        db.session.scalars(
            select(HeartbeatRun).where(HeartbeatRun.agent_id == agent_id).order_by(HeartbeatRun.created_at)
        )
    )


def finished_run(db, agent_id, index: int) -> HeartbeatRun | None:
    runs = runs_of(db, agent_id)
    if len(runs) > index and runs[index].status not in ("queued", "running"):
        return runs[index]
    return None


def assert_succeeded(db, run: HeartbeatRun) -> RunLog:
    log = db.session.get(RunLog, run.id)
    assert run.status == "succeeded", (run.error, log and log.stdout, log and log.stderr)
    return log


def signed_in_page(browser, base: str, email: str, password: str, journey: Journey | None = None):
    context = browser.new_context(viewport=VIEWPORT)
    watch_csp(context, CSP_VIOLATIONS)
    page = context.new_page()
    page.set_default_timeout(15_000)
    page.goto(f"{base}/login")
    page.fill("#email", email)
    page.fill("#password", password)
    if journey is not None:
        journey.shot(page, "login")
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/login" not in url)
    return context, page


@pytest.mark.browser
def test_the_whole_journey(app, db, journey_config, worker, honcho_server, oidc, oauth_mcp):
    if not os.path.exists(CHROMIUM):
        pytest.skip(f"{CHROMIUM} is not installed")
    from playwright.sync_api import sync_playwright

    base = journey_config
    directory = ARTIFACTS / "journey"
    directory.mkdir(parents=True, exist_ok=True)
    journey = Journey(directory)
    CSP_VIOLATIONS.clear()

    demo = load_demo()
    db.session.commit()
    owner_login, member_login = demo["users"]
    builder_id = uuid.UUID(next(a["id"] for a in demo["agents"] if a["name"] == "Builder"))
    issue = next(i for i in demo["issues"] if i["status"] == "in_progress")
    assert (
        issue["assigneeAgentId"] == str(builder_id) and issue["title"] == "Write the launch notes in Notion"
    )

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        try:
            owner_context, page = signed_in_page(
                browser, base, owner_login["email"], owner_login["password"], journey
            )
            honcho_id = connect_honcho(page, base, journey, db, honcho_server)
            shape_instructions(page, base, journey, db, honcho_id)

            # The worker picks up the demo's in-progress task: the example agent searches for Notion and asks for it.
            worker()
            first = eventually(db, lambda: finished_run(db, builder_id, 0), "the first run of Builder")
            log = assert_succeeded(db, first)
            assert "connections_search('notion')" in log.stdout
            assert "connection_request('notion')" in log.stdout and '"needs_user_action"' in log.stdout
            card_row = db.session.scalar(
                select(ThreadInteraction).where(
                    ThreadInteraction.issue_id == uuid.UUID(issue["id"]),
                    ThreadInteraction.kind == "connection_intent",
                )
            )
            assert card_row is not None and card_row.source_run_id == first.id
            interaction_id = str(card_row.id)
            first_session = log.session_id

            card = see_the_card(page, base, journey, issue, interaction_id)
            # The run that asked is not "succeeded" for the person: the thread says whom the task waits for.
            asked = page.locator(f"#run-{first.id}")
            expect(asked).to_contain_text("Waiting for Demo Owner")
            expect(asked.locator(".badge")).to_have_text("waiting")
            member_context, member_page = signed_in_page(
                browser, base, member_login["email"], member_login["password"]
            )
            member_sees_only_waiting(member_page, base, journey, issue, interaction_id)

            connect_notion_in_the_popup(page, journey, card, interaction_id, oidc)

            # The card re-reads the server: connected, the dialog closed, focus back on the card.
            card = page.locator(f"#intent-card-{interaction_id}")
            expect(card.get_by_text("Notion connected")).to_be_visible()
            expect(page.locator("dialog[open]")).to_have_count(0)
            expect(card).to_be_focused()
            journey.shot(page, "card-connected")
            db.session.rollback()
            assert db.session.get(ThreadInteraction, card_row.id).status == "accepted"

            # The continuation: a fresh session, Honcho's block in the snapshot, a Notion tool through the gateway.
            continuation = eventually(db, lambda: finished_run(db, builder_id, 1), "the continuation run")
            log = assert_succeeded(db, continuation)
            assert continuation.context_snapshot.get("outcome") == "connected"
            assert continuation.context_snapshot.get("interactionId") == interaction_id
            assert log.resumed_session_id is None and log.session_id and log.session_id != first_session
            assert "connected Notion for this task" in log.stdout
            assert "## Connection instructions" in log.stdout
            assert f'"workspaceId":"{WORKSPACE}"' in log.stdout
            assert "Honcho is your long-term memory" in log.stdout
            call_line = (
                'gateway tools/call notion__search_docs({"query": "Write the launch notes in Notion"})'
            )
            assert call_line in log.stdout
            assert "doc about Write the launch notes in Notion" in log.stdout
            assert '"status": "continuing"' in log.stdout
            assert oauth_mcp.calls == [("search_docs", {"query": "Write the launch notes in Notion"})]
            assert oauth_mcp.accepted_token_digests, "the Notion peer never saw a valid access token"
            assert len(runs_of(db, builder_id)) == 2

            # The thread followed the continuation without a reload (the page is the one the card was answered on):
            # the tool Builder called through the gateway, then how the run ended.
            live = page.locator(f"#run-{continuation.id}")
            expect(live).to_contain_text("Builder used Notion · search_docs", timeout=20_000)
            expect(live.locator(".badge")).to_have_text("finished", timeout=20_000)
            expect(page.locator(f"#run-{first.id}")).to_contain_text("Builder stopped to ask Demo Owner")
            journey.shot(page, "thread-live")
            see_the_run(page, base, journey, continuation)
            see_the_activity(page, base, journey, interaction_id, continuation)
            member_context.close()
            owner_context.close()
        finally:
            browser.close()

    # No page ever rendered a credential (the Honcho key, Notion's OAuth tokens); no activity row, card payload
    # or agent run log carries one either.
    db.session.rollback()
    notion = db.session.scalars(select(ToolConnection).where(ToolConnection.app_slug == "notion")).one()
    grant = db.session.scalars(
        select(ConnectionGrant).where(ConnectionGrant.connection_id == notion.id)
    ).one()
    tokens = [v for v in stored_secrets(grant).values() if isinstance(v, str) and v]
    assert tokens, "Notion's grant holds no token"
    secrets = [HONCHO_KEY, *tokens]
    assert journey.html and not any(secret in html for html in journey.html for secret in secrets)
    for log in db.session.scalars(select(RunLog)):
        assert not any(secret in log.stdout + log.stderr for secret in secrets)
    for row in db.session.scalars(select(ActivityLog)):
        assert not any(secret in json.dumps(row.details) for secret in secrets)
    for row in db.session.scalars(select(ThreadInteraction)):
        assert not any(secret in json.dumps([row.payload, row.result]) for secret in secrets)
    assert all(r.auth == "ok" for r in honcho_server.requests), honcho_server.requests
    # Every page of the journey worked under the Content-Security-Policy.
    assert CSP_VIOLATIONS == [], CSP_VIOLATIONS


# --- the steps ----------------------------------------------------------------------------------------------------


def connect_honcho(page, base: str, journey: Journey, db, honcho_server) -> uuid.UUID:
    """Apps -> Honcho -> Connect: first without the workspace (inline error), then with it."""
    page.get_by_role("link", name="Apps", exact=True).first.click()
    page.wait_for_url(f"{base}/apps")
    expect(page.get_by_role("heading", name="Apps", level=1)).to_be_visible()
    honcho_card = page.locator("article.app-card").filter(has=page.get_by_role("heading", name="Honcho"))
    expect(honcho_card).to_be_visible()
    journey.shot(page, "apps-catalog")

    honcho_card.get_by_role("button", name="Connect").click()
    page.wait_for_url(f"{base}/apps/honcho/connect")
    expect(page.get_by_role("heading", name="Connect Honcho", level=1)).to_be_visible()
    page.get_by_label("API key").fill(HONCHO_KEY)
    page.get_by_role("button", name="Connect", exact=True).click()
    error = page.locator("#setup-config-workspaceId-error")
    expect(error).to_be_visible()
    expect(page.get_by_label("Honcho workspace")).to_have_attribute("aria-invalid", "true")
    # Credentials are write-only: the key is not sent back, so it has to be typed again.
    expect(page.get_by_label("API key")).to_have_value("")
    scroll_to_top(page.get_by_text("Credentials", exact=True))
    journey.shot(page, "honcho-workspace-required")
    db.session.rollback()
    assert db.session.scalars(select(ToolConnection).where(ToolConnection.status == "active")).all() == []

    page.get_by_label("API key").fill(HONCHO_KEY)
    page.get_by_label("Honcho workspace").fill(WORKSPACE)
    page.get_by_role("button", name="Connect", exact=True).click()
    page.wait_for_url(lambda url: url.endswith("/permissions?done=connected"))
    expect(page.locator("#agent-instructions-editor")).to_be_visible()
    db.session.rollback()
    honcho = db.session.scalars(
        select(ToolConnection).where(ToolConnection.app_slug == "honcho", ToolConnection.status == "active")
    ).one()
    assert page.url == f"{base}/apps/{honcho.id}/permissions?done=connected"
    expect(page.locator("#connected-notice")).to_have_text(
        "Honcho is connected. The agents chosen below can use its tools now."
    )
    assert honcho.method_config == {"workspaceId": WORKSPACE}
    assert any(r.auth == "ok" for r in honcho_server.requests), "Honcho was never reached with the key"
    journey.keep(page)
    return honcho.id


def settled(page) -> None:
    """Wait until htmx has finished swapping and processed the new content (its listeners are live).

    The browser may focus an `autofocus` field as soon as it is inserted, before htmx's settle step binds its
    triggers, so "focused" alone does not mean "ready for input".
    """
    wait_until_true(
        page, "() => !document.querySelector('.htmx-request, .htmx-swapping, .htmx-settling, .htmx-added')"
    )


def scroll_to_top(locator) -> None:
    """Bring an element to the top of the viewport (for a screenshot that shows what follows it)."""
    locator.evaluate("(element) => element.scrollIntoView({block: 'start'})")


def wait_for_instructions(db, connection_id, expected) -> None:
    def current():
        value = db.session.get(ToolConnection, connection_id).agent_instructions
        return value == expected and value

    eventually(db, current, f"the saved instructions to become {expected!r}", timeout=10)


def shape_instructions(page, base: str, journey: Journey, db, connection_id) -> None:
    """Toggle off and on, edit and save, reset to default and save, then a failed save that keeps the draft."""
    from app.catalog.loader import get_app, template_default

    template = template_default(get_app("honcho"))
    editor = page.locator("#agent-instructions-editor")
    toggle = editor.get_by_role("switch", name="Tell agents to use Honcho")
    expect(toggle).to_be_checked()
    expect(editor.locator(".instructions-text")).to_contain_text("Honcho is your long-term memory")
    journey.shot(page, "permissions")

    settled(page)
    toggle.click()
    expect(editor.get_by_text(OFF_NOTICE)).to_be_visible()
    wait_for_instructions(db, connection_id, {**template, "enabled": False})
    settled(page)
    editor.get_by_role("switch", name="Tell agents to use Honcho").click()
    expect(editor.get_by_text(OFF_NOTICE)).to_have_count(0)
    expect(editor.get_by_role("switch", name="Tell agents to use Honcho")).to_be_checked()
    wait_for_instructions(db, connection_id, {**template, "enabled": True})

    settled(page)
    editor.get_by_role("button", name="Edit instructions").click()
    textarea = editor.locator("textarea#agent-instructions-text")
    expect(textarea).to_be_focused()
    settled(page)
    textarea.fill(CUSTOM_TEXT)
    settled(page)
    editor.get_by_role("button", name="Save instructions").click()
    expect(editor.get_by_text("Instructions saved.")).to_be_visible()
    expect(editor.locator(".instructions-text")).to_have_text(CUSTOM_TEXT)
    wait_for_instructions(db, connection_id, {"enabled": True, "text": CUSTOM_TEXT})

    settled(page)
    editor.get_by_role("button", name="Reset to default").click()
    expect(editor.locator(".instructions-text")).to_contain_text("Honcho is your long-term memory")
    settled(page)
    editor.get_by_role("button", name="Save instructions").click()
    expect(editor.get_by_text("Instructions saved.")).to_be_visible()
    expect(editor.get_by_role("button", name="Reset to default")).to_have_count(0)
    wait_for_instructions(db, connection_id, {**template, "enabled": True})

    # A pasted draft over the limit is kept whole (no maxlength cuts it): the live count says by how much, and Save
    # waits until it fits. (The server refuses such a save too: tests/web/apps/test_apps_pages.py.)
    settled(page)
    editor.get_by_role("button", name="Edit instructions").click()
    textarea = editor.locator("textarea#agent-instructions-text")
    expect(textarea).to_be_focused()
    sentence = "Recall the launch decisions and the customer's preferences before drafting anything. "
    draft = (sentence * (2001 // len(sentence) + 1))[:2001]
    settled(page)
    textarea.fill(draft)
    expect(editor.get_by_text("2,001 / 2,000 characters")).to_be_visible()
    expect(editor.get_by_role("alert")).to_contain_text(
        "limited to 2,000 characters; shorten them by 1 to save"
    )
    expect(editor.get_by_role("button", name="Save instructions")).to_be_disabled()
    expect(editor.locator("textarea#agent-instructions-text")).to_have_value(draft)
    scroll_to_top(page.get_by_role("heading", name="Agent instructions"))
    journey.shot(page, "instructions-failed-save")
    wait_for_instructions(db, connection_id, {**template, "enabled": True})

    settled(page)
    editor.get_by_role("button", name="Cancel").click()
    expect(editor.locator("textarea#agent-instructions-text")).to_have_count(0)
    expect(editor.locator(".instructions-text")).to_contain_text("Honcho is your long-term memory")
    expect(editor.get_by_role("switch", name="Tell agents to use Honcho")).to_be_checked()
    scroll_to_top(page.get_by_role("heading", name="Agent instructions"))
    journey.shot(page, "instructions-editor")


def see_the_card(page, base: str, journey: Journey, issue: dict, interaction_id: str):
    page.goto(f"{base}/tasks/{issue['id']}")
    expect(page.get_by_role("heading", name=issue["title"], level=1)).to_be_visible()
    card = page.locator(f"#intent-card-{interaction_id}")
    expect(card.get_by_role("heading", name="Builder needs Notion")).to_be_visible()
    expect(card.get_by_role("button", name="Connect", exact=True)).to_be_visible()
    expect(card.get_by_role("button", name="Not now")).to_be_visible()
    card.scroll_into_view_if_needed()
    journey.shot(page, "task-card")
    return card


def member_sees_only_waiting(page, base: str, journey: Journey, issue: dict, interaction_id: str) -> None:
    page.goto(f"{base}/tasks/{issue['id']}")
    card = page.locator(f"#intent-card-{interaction_id}")
    expect(card.get_by_role("heading", name="Builder needs Notion")).to_be_visible()
    expect(card.get_by_text("Waiting for Demo Owner")).to_be_visible()
    expect(card.get_by_role("button")).to_have_count(0)
    expect(card.locator("dialog")).to_have_count(0)
    card.scroll_into_view_if_needed()
    journey.shot(page, "member-waiting")


def connect_notion_in_the_popup(page, journey: Journey, card, interaction_id: str, oidc) -> None:
    """The card's dialog hosts the setup flow; the OAuth sign-in runs in a popup against the OpenID Provider."""
    settled(page)
    card.get_by_role("button", name="Connect", exact=True).click()
    dialog = page.locator(f"#intent-dialog-{interaction_id}")
    expect(dialog).to_be_visible()
    expect(dialog.get_by_role("heading", name="Connect Notion for Builder")).to_be_visible()
    # Builder asked for it, so it is locked into the audience.
    expect(dialog.get_by_text("Builder asked for this connection, so it always gets access.")).to_be_visible()
    journey.shot(page, "connect-dialog")

    settled(page)
    # One click (issue 16): the setup form's button opens the sign-in window and, once the choices are saved,
    # the sign-in step's form is posted into it.
    with page.expect_popup() as popup_info:
        dialog.locator("#setup-flow").get_by_role("button", name="Sign in with Notion").click()
    expect(dialog.get_by_text("Nothing is shared until you finish signing in.")).to_be_visible()
    popup = popup_info.value
    popup.set_default_timeout(15_000)
    try:
        popup.wait_for_url(f"{oidc.issuer}/**")
    except PlaywrightTimeoutError:
        raise AssertionError(
            f"the sign-in popup never reached the provider (it stayed at {popup.url}): the sign-in form must "
            "be submitted natively into the popup, not as a boosted htmx request that follows the redirect"
        ) from None
    popup.wait_for_selector("input[name=login]")
    popup.fill("input[name=login]", "alice")
    popup.fill("input[name=password]", "any")
    journey.shot(popup, "oauth-popup-login")
    popup.get_by_role("button", name="Sign-in").click()
    consent = popup.locator("input[name=prompt][value=consent]")
    consent.wait_for(state="attached")
    journey.shot(popup, "oauth-popup-consent")
    # After consent the provider redirects to our callback, whose page posts the outcome to the card and closes.
    with popup.expect_event("close", timeout=30_000):
        popup.get_by_role("button", name="Continue").click()


def see_the_run(page, base: str, journey: Journey, run: HeartbeatRun) -> None:
    """The continuation's run page: a fresh session, the instruction digest, the Honcho block and the tool call."""
    page.goto(f"{base}/runs/{run.id}")
    expect(page.locator(f"#run-{run.id} .badge")).to_have_text("finished")
    run_log = page.locator(f"#run-log-{run.id}")
    expect(run_log).to_contain_text("fresh session")
    expect(run_log).to_contain_text("## Connection instructions")
    expect(run_log).to_contain_text(f'"workspaceId":"{WORKSPACE}"')
    expect(run_log).to_contain_text("gateway tools/call notion__search_docs")
    expect(run_log).to_contain_text("doc about Write the launch notes in Notion")
    # The end of the log: the snapshot's digest, the gateway's tools and the call's result.
    page.evaluate("window.scrollTo(0, document.body.scrollHeight)")
    journey.shot(page, "continuation-run")


def see_the_activity(
    page, base: str, journey: Journey, interaction_id: str, continuation: HeartbeatRun
) -> None:
    page.goto(f"{base}/activity")
    expect(page.get_by_role("heading", name="Activity", level=1)).to_be_visible()
    for action in (
        "tool_app.finished",
        "tool_connection.updated",
        "issue.thread_interaction_created",
        "tool_app.oauth_started",
        "tool_app.oauth_connected",
        "issue.connection_intent_connected",
        "run.started",
        "run.succeeded",
        "tool_gateway.call",
    ):
        expect(page.locator(f"tr[data-action='{action}']").first).to_be_visible()
    expect(page.locator("tr[data-action='run.succeeded']")).to_have_count(2)
    created = page.locator("tr[data-action='issue.thread_interaction_created']")
    expect(created).to_contain_text(interaction_id)
    connected = page.locator("tr[data-action='issue.connection_intent_connected']")
    expect(connected).to_contain_text(interaction_id)
    call = page.locator("tr[data-action='tool_gateway.call']")
    expect(call).to_have_count(1)
    expect(call).to_contain_text("notion__search_docs")
    expect(call).to_contain_text("allowed")
    expect(call).to_contain_text(str(continuation.id))
    journey.shot(page, "activity")
