"""The assistant consent page in Chromium (issue 29): a person signs in, reads who asks and what it can do, allows,
and the browser really lands on the assistant's loopback redirect with a code (the form is not taken over by htmx);
no Content-Security-Policy violation on the way."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.sync_api import expect

from tests.browser.conftest import sign_in_through_the_form
from tests.factories import DEFAULT_PASSWORD
from tests.web.assistant_oauth.flow import authorize_query, exchange, pkce, register


@pytest.fixture
def callback_server():
    """The assistant's loopback redirect: records the query it is sent."""
    received: list[dict] = []

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 (http.server's name)
            received.append({k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()})
            body = b"<!doctype html><title>Signed in</title><p>You can close this window.</p>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/callback", received
    finally:
        server.shutdown()
        thread.join(timeout=5)


@pytest.mark.browser
def test_a_person_allows_an_assistant_in_chromium(make, app, live_server, page, callback_server):
    redirect, received = callback_server
    company = make.company("Acme")
    owner = make.member(company, "owner", user=make.user(name="Demo Owner"))
    script = app.test_client()
    client_id = register(script, redirect=redirect)["client_id"]
    verifier, challenge = pkce()
    sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)
    page.goto(live_server + authorize_query(client_id, challenge, redirect=redirect))
    expect(page.get_by_role("heading", level=1)).to_have_text("Connect Claude Code to Switchboard?")
    expect(page.locator("article")).to_contain_text("Claude Code (Demo Owner)")
    expect(page.locator("article")).to_contain_text(
        "registered itself with Switchboard; nothing about it is verified"
    )
    expect(page.get_by_label("Company it will act in")).to_have_value(str(company.id))
    page.get_by_role("button", name="Allow").click()
    page.wait_for_url(redirect + "?*")
    expect(page.locator("p")).to_have_text("You can close this window.")
    assert received and received[0]["state"] == "st4te" and received[0]["iss"] == "http://127.0.0.1:5000"
    tokens = exchange(script, client_id, received[0]["code"], verifier, redirect=redirect)
    assert tokens.status_code == 200 and tokens.json["access_token"].startswith("sba_")
