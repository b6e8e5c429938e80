"""The Inbox journey in Chromium (issue 15): an agent requests a service; the owner's badge and inbox show it
without a reload; the owner connects from the inbox; Done says who answered; the mail and the signed webhook
arrive at loopback peers."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect
from standardwebhooks.webhooks import Webhook

from app.services.notifications import webhooks
from app.workers import outbox
from tests.browser.conftest import sign_in_through_the_form
from tests.doors import request_service
from tests.factories import DEFAULT_PASSWORD
from tests.peers.mcp_servers import HONCHO_KEY
from tests.peers.notification_peers import start_webhook_receiver
from tests.services.notifications.test_notifications import smtp  # noqa: F401  (the loopback SMTP peer)
from tests.services.runtime import test_runtime_rest

providers = test_runtime_rest.providers  # honcho -> the real MCP peer; loopback allowed for member URLs
POLL_WAIT_MS = 20_000  # the pollers run every 5 s


@pytest.mark.browser
def test_the_owner_sees_answers_and_is_told_without_a_reload(
    app,
    db,
    make,
    providers,
    smtp,  # noqa: F811
    live_server,
    page,
    artifacts,
):
    company = make.company("Acme", "ACME")
    owner = make.member(company, "owner", user=make.user("olivia@example.com", "Olivia Owner"))
    agent = make.agent(company, "Builder")
    issue = make.issue(
        company, title="Ship the report", status="in_progress", assignee=agent, responsible=owner
    )
    receiver = start_webhook_receiver()
    try:
        _endpoint, secret = webhooks.create_endpoint(
            make.membership(company, owner),
            receiver.url,
            ["connection_intent.created", "connection_intent.resolved"],
        )
        db.session.commit()

        sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)
        page.goto(f"{live_server}/inbox")
        expect(page.get_by_text("Nothing is waiting for you.")).to_be_visible()
        expect(page.locator("#inbox-nav .inbox-count")).to_have_count(0)

        _, token = make.run(agent, issue)
        answer = request_service(app.test_client(), token, "honcho").json
        assert answer["state"] == "needs_user_action"
        interaction_id = answer["interactionId"]

        # No reload: the pollers bring the badge and the card.
        expect(page.locator("#inbox-nav .inbox-count")).to_have_text("1", timeout=POLL_WAIT_MS)
        card = page.locator(f"#intent-card-{interaction_id}")
        expect(card.get_by_role("heading", name="Builder needs Honcho")).to_be_visible(timeout=POLL_WAIT_MS)
        expect(page.locator(f"#inbox-item-{interaction_id}")).to_contain_text("Ship the report")
        page.screenshot(path=str(artifacts / "inbox-open.png"))  # kept as docs/screenshots/7-inbox.png

        card.get_by_role("button", name="Connect", exact=True).click()
        dialog = page.locator(f"#intent-dialog-{interaction_id}")
        expect(dialog).to_be_visible()
        dialog.get_by_label("API key").fill(HONCHO_KEY)
        dialog.get_by_label("Honcho workspace").fill("team")
        dialog.get_by_role("button", name="Connect", exact=True).click()
        expect(page.locator(f"#intent-card-{interaction_id}").get_by_text("Honcho connected")).to_be_visible()
        expect(page.locator("#inbox-nav .inbox-count")).to_have_count(0, timeout=POLL_WAIT_MS)

        page.get_by_role("link", name="Done").click()
        done = page.locator(f"#inbox-item-{interaction_id}")
        expect(done).to_contain_text("answered by Olivia Owner")
        page.screenshot(path=str(artifacts / "inbox-done.png"))
        assert HONCHO_KEY not in page.content()

        # The worker sends what the card's transactions queued: one mail, and the signed webhooks.
        outbox.sweep_pending()
        [(envelope, message)] = smtp.wait_for(1)
        assert envelope.rcpt_tos == ["olivia@example.com"]
        assert message["Subject"] == "Builder needs Honcho for ACME-1"
        assert f"/tasks/{issue.id}#item-{interaction_id}" in message.get_content()
        hooks = receiver.wait_for(2)
        bodies = [Webhook(secret).verify(hook.body, hook.headers) for hook in hooks]
        assert [(b["type"], b["data"].get("outcome")) for b in bodies] == [
            ("connection_intent.created", None),
            ("connection_intent.resolved", "connected"),
        ]
    finally:
        receiver.stop()
