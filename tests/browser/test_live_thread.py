"""The task page follows a working run without a reload, at desktop and phone widths (issue 27 item 1).

The run is live (its token is real), it calls Honcho through the real gateway door while the page is open, and then
ends with a final message: the thread's poller brings each step in. axe finds no serious violation in the run's
entry, and nothing overflows the phone's width."""

from __future__ import annotations

import pytest
from playwright.sync_api import expect

from app.adapters import AdapterResult
from app.extensions import db
from app.services.runs.lifecycle import complete_run
from tests.browser.conftest import sign_in_through_the_form
from tests.browser.test_accessibility import axe_violations
from tests.doors import rpc
from tests.factories import DEFAULT_PASSWORD
from tests.peers.mcp_servers import HONCHO_KEY
from tests.services.gateway.test_gateway import connect

POLL_MS = 15_000  # the thread polls every 5 s


@pytest.mark.browser
@pytest.mark.parametrize("viewport", [{"width": 1366, "height": 900}, {"width": 390, "height": 844}])
def test_the_thread_shows_the_agent_working_live(
    app, make, client, providers, live_server, browser, viewport, artifacts
):
    world = make.task_run(client=client)
    honcho = connect(world, "honcho", HONCHO_KEY)
    # Names a reader of the README's screenshots can follow.
    world.issue.title, world.owner.name = "Save the launch notes", "Dana Owner"
    db.session.commit()
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.set_default_timeout(10_000)
    try:
        sign_in_through_the_form(page, live_server, world.owner.email, DEFAULT_PASSWORD)
        page.goto(f"{live_server}/tasks/{world.issue.id}")
        entry = page.locator(f"#run-{world.run.id}")
        expect(entry).to_contain_text("Builder is working…")
        expect(entry.locator(".badge")).to_have_text("working")

        call = {"name": "honcho__search_memory", "arguments": {"query": "launch"}}
        assert not rpc(world.client, world.token, "tools/call", call).json["result"]["isError"]
        expect(entry.get_by_role("list", name="Tools Builder used")).to_have_text(
            f"Builder used {honcho['name']} · search_memory", timeout=POLL_MS
        )
        width = viewport["width"]
        # Kept as docs/screenshots/14-live-thread-working.png (1366 px).
        page.screenshot(path=str(artifacts / f"live-thread-working-{width}.png"))

        db.session.refresh(world.run)
        complete_run(world.run, AdapterResult(ok=True, summary={"finalMessage": "Saved the launch notes."}))
        db.session.commit()
        expect(entry.locator(".badge")).to_have_text("finished", timeout=POLL_MS)
        expect(entry).to_contain_text("Builder finished")
        expect(entry.locator(".run-final")).to_have_text("Saved the launch notes.")
        # The Runs panel beside the thread follows the same poll: never "working" beside "finished".
        expect(page.locator("#task-runs .badge")).to_have_text("finished")
        # Kept as docs/screenshots/15-live-thread-finished.png (1366 px) and 16-phone-live-thread.png (390 px).
        page.screenshot(path=str(artifacts / f"live-thread-finished-{width}.png"))

        assert [v["id"] for v in axe_violations(page) if v["impact"] in ("serious", "critical")] == []
        assert page.evaluate("document.documentElement.scrollWidth <= document.documentElement.clientWidth")
    finally:
        context.close()
