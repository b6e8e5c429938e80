"""A card's OAuth sign-in through the real redirects (live app, real OpenID Provider, OAuth-protected MCP peer):
the callback resolves the card, a denied sign-in moves it to `needs_retry`, and only the addressee can finish it."""

from __future__ import annotations

import html
import json
import re
import uuid
from urllib.parse import parse_qs, urlsplit

import pytest
from sqlalchemy import select

from app.models import ThreadInteraction, ToolConnection, WakeupRequest
from tests.services.oauth.test_oauth import APP_SLUG, Browser, live  # noqa: F401  (the live-server fixture)

MESSAGE_RE = re.compile(r'data-message="([^"]*)"')


@pytest.fixture
def card(app, db, make):
    card = make.requested_card(APP_SLUG)
    assert card.answer["state"] == "needs_user_action", card.answer
    return card.company, card.member, card.owner, card.agent, card.issue, card.id


def start_from_card(browser: Browser, connection_id: str, interaction_id: str) -> str:
    response = browser.keep(
        browser.http.post(
            f"{browser.base}/apps/{connection_id}/oauth/start",
            data={"csrf_token": browser.csrf, "interaction_id": interaction_id},
            headers={"Origin": browser.base},
            allow_redirects=False,
            timeout=10,
        )
    )
    assert response.status_code == 303, response.text
    return response.headers["Location"]


def opener_message(response) -> dict:
    assert response.status_code == 200, response.text
    return json.loads(html.unescape(MESSAGE_RE.search(response.text).group(1)))


def interaction(db, interaction_id) -> ThreadInteraction:
    db.session.expire_all()
    return db.session.get(ThreadInteraction, uuid.UUID(interaction_id))


def test_callback_completes_the_card_and_posts_only_the_outcome(live, db, card):  # noqa: F811
    company, member, _, agent, issue, interaction_id = card
    browser = Browser(live, member)
    connection_id = browser.create_draft(company)
    response = browser.callback(browser.authorize(start_from_card(browser, connection_id, interaction_id)))
    assert opener_message(response) == {
        "type": "paperclip.connection-intent.oauth",
        "interactionId": interaction_id,
        "outcome": "connected",
    }
    assert f"/tasks/{issue.id}" in response.text
    row = interaction(db, interaction_id)
    assert row.status == "accepted"
    assert row.result == {"version": 1, "outcome": "connected", "connectionId": connection_id}
    assert db.session.get(ToolConnection, uuid.UUID(connection_id)).status == "active"
    wakes = db.session.scalars(select(WakeupRequest)).all()
    assert [w.idempotency_key for w in wakes] == [f"connection-intent:{interaction_id}:connected"]
    # The card, re-read by the page, says so.
    card_html = browser.http.get(
        f"{live}/intents/{interaction_id}/card", headers={"HX-Request": "true"}, timeout=10
    ).text
    assert "Linear connected" in card_html and "authorize" not in card_html


def test_a_denied_sign_in_moves_the_card_to_needs_retry(live, db, card):  # noqa: F811
    company, member, _, _, _, interaction_id = card
    browser = Browser(live, member)
    connection_id = browser.create_draft(company)
    url = browser.authorize(start_from_card(browser, connection_id, interaction_id), deny=True)
    response = browser.callback(url)
    assert opener_message(response)["outcome"] == "needs_retry"
    row = interaction(db, interaction_id)
    assert row.status == "pending" and row.payload["phase"] == "needs_retry"
    assert row.payload["lastFailure"] == "oauth_access_denied"
    card_html = browser.http.get(
        f"{live}/intents/{interaction_id}/card", headers={"HX-Request": "true"}, timeout=10
    ).text
    assert "Try again" in card_html and "Setup saved" not in card_html
    assert (
        "Sign-in to Linear was cancelled, so nothing was connected. Try again or choose another method."
        in card_html
    )
    assert db.session.scalars(select(WakeupRequest)).all() == []


def test_another_user_at_the_callback_is_refused(live, db, card):  # noqa: F811
    company, member, owner, _, _, interaction_id = card
    browser = Browser(live, member)
    connection_id = browser.create_draft(company)
    url = browser.authorize(start_from_card(browser, connection_id, interaction_id))
    intruder = Browser(live, owner)
    assert intruder.callback(url).status_code == 403
    assert interaction(db, interaction_id).status == "pending"


def test_a_sign_in_started_by_someone_else_cannot_resolve_the_card(live, db, card):  # noqa: F811
    company, _, owner, _, _, interaction_id = card
    browser = Browser(live, owner)  # not the addressee, but starts with the card's id
    connection_id = browser.create_draft(company)
    response = browser.callback(browser.authorize(start_from_card(browser, connection_id, interaction_id)))
    assert response.status_code == 403
    assert (
        "This sign-in answers a request addressed to someone else, so nothing was connected." in response.text
    )
    assert interaction(db, interaction_id).status == "pending"
    assert db.session.get(ToolConnection, uuid.UUID(connection_id)).status == "draft"


def json_start(browser: Browser, connection_id: str, interaction_id: str, origin: str) -> str:
    response = browser.keep(
        browser.http.post(
            f"{browser.base}/api/tools/oauth/{connection_id}/start",
            json={"interactionId": interaction_id},
            headers={"X-CSRFToken": browser.csrf, "Origin": origin},
            timeout=10,
        )
    )
    assert response.status_code == 200, response.text
    assert set(response.json()) == {"authorizationUrl"}
    return response.json()["authorizationUrl"]


def test_json_start_from_a_task_card_posts_the_outcome_to_the_opener(live, db, card):  # noqa: F811
    company, member, _, _, issue, interaction_id = card
    browser = Browser(live, member)
    # A denial on the provider's side reports needs_retry and keeps the draft for the next attempt; an unusable
    # opener origin falls back to our own.
    denied_draft = browser.create_draft(company)
    url = json_start(browser, denied_draft, interaction_id, "javascript:alert(1)")
    assert parse_qs(urlsplit(url).query)["code_challenge_method"] == ["S256"]
    denied = browser.callback(browser.authorize(url, deny=True))
    assert opener_message(denied)["outcome"] == "needs_retry"
    assert f'data-target-origin="{live}"' in denied.text
    assert db.session.get(ToolConnection, uuid.UUID(denied_draft)).status == "draft"

    opener = "http://127.0.0.1:4999"
    connection_id = browser.create_draft(company)
    page = browser.callback(browser.authorize(json_start(browser, connection_id, interaction_id, opener)))
    assert opener_message(page) == {
        "type": "paperclip.connection-intent.oauth",
        "interactionId": interaction_id,
        "outcome": "connected",
    }
    assert f'data-target-origin="{opener}"' in page.text
    assert f"/tasks/{issue.id}" in page.text  # without an opener the page goes back to the task
    db.session.expire_all()
    assert db.session.get(ToolConnection, uuid.UUID(connection_id)).status == "active"
    assert interaction(db, interaction_id).status == "accepted"
