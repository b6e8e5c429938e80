"""Every way an OAuth sign-in can fail lands on a page that says what happened, in whole sentences, with a way back to
where the person came from (issue 16): never a page titled with a status number, never a setting's name.

Through the real redirects: the live app, the local OpenID Provider (npm `oidc-provider`) and the OAuth-protected MCP
peer; a `requests.Session` plays the browser (tests/test_oauth.py)."""

from __future__ import annotations

import socket
import uuid
from html.parser import HTMLParser
from urllib.parse import urlencode, urlsplit

from app.services.intents import resolution as intents_resolution
from tests.services.intents.test_intent_oauth import card, start_from_card  # noqa: F401  (the card fixture)
from tests.services.oauth.test_oauth import APP_SLUG, Browser, live, owner  # noqa: F401  (fixtures)

NOT_FINISHED = "Sign-in not finished"
COULD_NOT_START = "Sign-in could not start"


class Page(HTMLParser):
    """The parts of a page a person reads first: its title, its heading, its alert and its links."""

    def __init__(self, html: str):
        super().__init__()
        self.title = ""
        self.h1 = ""
        self.alerts: list[str] = []
        self.links: list[tuple[str, str]] = []
        self.buttons: list[str] = []
        self._open: list[tuple[str, dict]] = []
        self._text: dict[int, list[str]] = {}
        self.feed(html)

    def handle_starttag(self, tag, attrs):
        if tag in ("meta", "link", "input", "img", "br"):
            return
        self._open.append((tag, dict(attrs)))
        self._text[len(self._open)] = []

    def handle_endtag(self, tag):
        while self._open:
            depth = len(self._open)
            open_tag, attrs = self._open.pop()
            text = " ".join("".join(self._text.pop(depth, [])).split())
            if self._open:
                self._text[len(self._open)].append(text + " ")
            if open_tag == "title":
                self.title = text
            elif open_tag == "h1" and not self.h1:
                self.h1 = text
            elif open_tag == "a":
                self.links.append((text, attrs.get("href", "")))
            elif open_tag == "button":
                self.buttons.append(text)
            if attrs.get("role") == "alert" and text:
                self.alerts.append(text)
            if open_tag == tag:
                break

    def handle_data(self, data):
        if self._open:
            self._text[len(self._open)].append(data)


def read(response) -> Page:
    text = response.text
    assert "SWITCHBOARD_" not in text
    page = Page(text)
    assert not page.title.split(" ")[0].isdigit(), page.title
    return page


def assert_page(response, status, title, message, back, *, buttons=()):
    assert response.status_code == status, response.text
    page = read(response)
    assert (page.title, page.h1) == (f"{title} · Switchboard", title)
    assert page.alerts == [message]
    assert back in page.links, page.links
    assert [b for b in page.buttons if b not in ("Menu", "Sign out")] == list(buttons)


def callback_url(authorization_url: str, **params) -> str:
    """Our callback, as the provider would call it for this authorization request's state."""
    query = dict(p.split("=", 1) for p in urlsplit(authorization_url).query.split("&"))
    base = query["redirect_uri"].replace("%3A", ":").replace("%2F", "/")
    return f"{base}?{urlencode({'state': query['state'].replace('%2E', '.'), **params})}"


def closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_a_state_that_is_unknown_used_or_someone_elses(live, owner, make):  # noqa: F811
    company, user = owner
    browser = Browser(live, user)
    back_to_apps = ("Back to Apps", "/apps")
    used = "This sign-in was already used or has expired, so nothing was connected. Start it again."

    unknown = browser.callback(f"{live}/oauth/callback?state=made-up&code=whatever")
    assert_page(unknown, 400, NOT_FINISHED, used, back_to_apps)

    connection_id = browser.create_draft(company)
    callback = browser.authorize(browser.start(connection_id))
    colleague = Browser(live, make.member(company, "owner"))
    someone_else = colleague.callback(callback)
    assert_page(
        someone_else,
        403,
        NOT_FINISHED,
        "This sign-in was started by someone else. Start it again from your own session.",
        back_to_apps,
    )
    assert browser.callback(callback).status_code == 303  # connected
    replayed = browser.callback(callback)
    assert_page(replayed, 400, NOT_FINISHED, used, back_to_apps)


def test_denied_consent_and_a_refused_code_exchange(live, owner):  # noqa: F811
    company, user = owner
    browser = Browser(live, user)
    connection_id = browser.create_draft(company)
    back_to_setup = ("Back to the setup", f"/apps/{APP_SLUG}/connect?draft_id={connection_id}")

    denied = browser.callback(browser.authorize(browser.start(connection_id), deny=True))
    assert "error=access_denied" in denied.url
    assert_page(
        denied,
        400,
        NOT_FINISHED,
        "Sign-in to Linear was cancelled, so nothing was connected. Try again or choose another method.",
        back_to_setup,
        buttons=["Try again with Linear"],
    )

    refused = browser.callback(
        callback_url(browser.start(connection_id), code="not-a-code-the-provider-issued")
    )
    assert_page(
        refused,
        502,
        NOT_FINISHED,
        "Linear did not accept the sign-in when Switchboard finished it. Try again.",
        back_to_setup,
        buttons=["Try again with Linear"],
    )


def test_no_authorization_server_and_no_oauth_client(app, live, owner):  # noqa: F811
    company, user = owner
    browser = Browser(live, user)
    connection_id = browser.create_draft(company)
    app.config["PROVIDER_SERVER_URLS"] = {APP_SLUG: f"http://127.0.0.1:{closed_port()}/mcp"}
    start = browser.http.post(
        f"{live}/apps/{connection_id}/oauth/start", data={"csrf_token": browser.csrf}, allow_redirects=False
    )
    assert_page(
        start,
        422,
        COULD_NOT_START,
        "Could not read the provider's authorization server metadata.",
        ("Back to the setup", f"/apps/{APP_SLUG}/connect?draft_id={connection_id}"),
    )

    # Asana signs in only with an OAuth client the operator registers; none is configured here.
    asana = browser.http.post(
        f"{live}/api/companies/{company.id}/tools/apps/connect",
        json={"appSlug": "asana", "methodKey": "mcp-oauth", "identity": "user"},
        headers={"X-CSRFToken": browser.csrf},
    )
    assert asana.status_code == 201, asana.text
    start = browser.http.post(
        f"{live}/apps/{asana.json()['id']}/oauth/start",
        data={"csrf_token": browser.csrf},
        allow_redirects=False,
    )
    not_configured = (
        "Asana sign-in is not set up on this Switchboard yet. "
        "Ask the person who runs Switchboard to add an OAuth client for Asana."
    )
    back = ("Back to the setup", f"/apps/asana/connect?draft_id={asana.json()['id']}")
    assert_page(start, 422, COULD_NOT_START, not_configured, back)

    # The Apps page's own form says the same where the person is, and keeps the form.
    form = browser.http.post(
        f"{live}/apps/asana/connect",
        data={"csrf_token": browser.csrf, "method_key": "mcp-oauth", "identity": "user", "audience": "all"},
        allow_redirects=False,
    )
    assert form.status_code == 422
    page = read(form)
    assert page.alerts == [f"Sign-in with Asana could not start. {not_configured}"]
    assert "Sign in with Asana" in page.buttons


def test_a_callback_after_the_card_closed_and_a_card_sign_in_that_fails(live, db, card):  # noqa: F811
    company, member, _, _, issue, interaction_id = card
    browser = Browser(live, member)
    connection_id = browser.create_draft(company)
    back_to_task = ("Back to the task", f"/tasks/{issue.id}")

    # Denied at the provider: the window tells the card and closes; opened on its own, it says why and leads back.
    denied = browser.callback(
        browser.authorize(start_from_card(browser, connection_id, interaction_id), deny=True)
    )
    assert denied.status_code == 200
    page = read(denied)
    assert (page.title, page.h1) == (f"{NOT_FINISHED} · Switchboard", NOT_FINISHED)
    assert page.alerts == [
        "Sign-in to Linear was cancelled, so nothing was connected. Try again or choose another method."
    ]
    assert ("return to the task", f"/tasks/{issue.id}") in page.links

    late = browser.authorize(start_from_card(browser, connection_id, interaction_id))
    intents_resolution.decline_intent(uuid.UUID(interaction_id), member.id, None)
    db.session.commit()
    closed = (
        "This request was closed before sign-in finished. Nothing was connected and no sign-in was stored."
    )
    assert_page(browser.callback(late), 409, "Request closed", closed, back_to_task)

    # Starting a sign-in for the closed card says the same, before the provider is ever asked.
    start = browser.http.post(
        f"{live}/apps/{connection_id}/oauth/start",
        data={"csrf_token": browser.csrf, "interaction_id": interaction_id},
        allow_redirects=False,
    )
    assert_page(start, 409, "Request closed", closed, back_to_task)
