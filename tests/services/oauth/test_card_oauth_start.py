"""A card's OAuth sign-in starts with one click with or without JavaScript (issue 16): without htmx the dialog's
"Sign in with <provider>" answers with the redirect to the provider at once (the setup saved on the card first), and
the callback resolves the card; in the dialog (htmx) a provider that cannot be signed in with is refused in the form
before any sign-in window is used. Through the real redirects (live app, local OpenID Provider, OAuth MCP peer)."""

from __future__ import annotations

import re
import uuid

from app.models import ThreadInteraction, ToolConnection
from tests.doors import request_service
from tests.services.intents.test_intent_oauth import card, interaction, opener_message  # noqa: F401  (the card fixture)
from tests.services.oauth.test_oauth import APP_SLUG, Browser, live  # noqa: F401  (the live-server fixture)

REFUSAL_RE = re.compile(
    r'<div class="alert alert-danger" role="alert" id="setup-flow-refusal">(.*?)</div>', re.S
)


def submit_setup(browser: Browser, interaction_id: str, agent, *, htmx: bool, method_key="mcp-oauth"):
    return browser.keep(
        browser.http.post(
            f"{browser.base}/intents/{interaction_id}/setup",
            data={
                "csrf_token": browser.csrf,
                "method_key": method_key,
                "identity": "user",
                "audience": "selected",
                "agent_ids": [str(agent.id)],
            },
            headers={"HX-Request": "true", "HX-Target": "setup-flow"} if htmx else {},
            allow_redirects=False,
            timeout=10,
        )
    )


def test_without_javascript_one_click_goes_to_the_provider_and_the_callback_resolves_the_card(
    live,  # noqa: F811
    db,
    card,  # noqa: F811
    oidc,
):
    company, member, _, agent, issue, interaction_id = card
    browser = Browser(live, member)
    answer = submit_setup(browser, interaction_id, agent, htmx=False)
    assert answer.status_code == 303, answer.text
    assert answer.headers["Location"].startswith(f"{oidc.issuer}/auth?")
    assert interaction(db, interaction_id).payload["phase"] == "authorizing"

    response = browser.callback(browser.authorize(answer.headers["Location"]))
    assert opener_message(response)["outcome"] == "connected"
    assert f"/tasks/{issue.id}" in response.text  # with no window behind it, the page goes back to the task
    row = interaction(db, interaction_id)
    assert row.status == "accepted"
    connection = db.session.get(ToolConnection, uuid.UUID(row.result["connectionId"]))
    assert (connection.app_slug, connection.status) == (APP_SLUG, "active")


def test_in_the_dialog_a_provider_without_an_oauth_client_is_refused_in_the_form(app, live, db, make):  # noqa: F811
    company = make.company("Acme")
    member = make.member(company, "member")
    agent = make.agent(company, "Builder")
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=member)
    _, token = make.run(agent, issue)
    interaction_id = request_service(app.test_client(), token, "asana").json["interactionId"]
    browser = Browser(live, member)

    answer = submit_setup(browser, interaction_id, agent, htmx=True)
    assert answer.status_code == 422, answer.text
    assert "data-intent-oauth" not in answer.text  # no sign-in step: the window the click opened closes
    assert "SWITCHBOARD_" not in answer.text
    refusal = " ".join(
        REFUSAL_RE.search(answer.text).group(1).replace("<strong>", "").replace("</strong>", "").split()
    )
    assert refusal == (
        "Sign-in with Asana could not start. Asana sign-in is not set up on this Switchboard yet. "
        "Ask the person who runs Switchboard to add an OAuth client for Asana."
    )
    db.session.expire_all()
    row = db.session.get(ThreadInteraction, uuid.UUID(interaction_id))
    assert row.status == "pending" and row.payload.get("phase", "requested") == "requested"
