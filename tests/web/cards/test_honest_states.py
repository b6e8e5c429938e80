"""Honest card states (issue 26 item 10): a refused key asks to try again, a reloaded successful callback says
connected, a failed sign-in is recorded even when its person lost the right to finish it, and an answered card is
never silently replaced under the same key."""

from __future__ import annotations

import uuid

from sqlalchemy import select

from app.models import ActivityLog, Membership, ThreadInteraction, ToolConnection
from app.services.intents import resolution
from app.services.tenancy import change_member
from tests.conftest import sign_in
from tests.doors import request_service
from tests.services.intents.test_intent_oauth import opener_message
from tests.services.oauth.test_oauth import APP_SLUG as OAUTH_APP
from tests.services.oauth.test_oauth import Browser, live  # noqa: F401  (the live-server fixture)
from tests.services.runtime.test_runtime_rest import providers  # noqa: F401  (the shared fixture)
from tests.web.cards.test_intent_cards import Htmx, setup_form

DECLINED = (
    "The user declined this connection. Pursue alternatives; do not request it again in this continuation."
)


def card_row(db, card) -> ThreadInteraction:
    db.session.expire_all()
    return db.session.get(ThreadInteraction, uuid.UUID(card.id))


def actions(db, action: str) -> list[ActivityLog]:
    db.session.expire_all()
    return list(db.session.scalars(select(ActivityLog).where(ActivityLog.action == action)))


# --- a refused key -------------------------------------------------------------------------------------------


def test_a_key_refused_in_the_card_dialog_moves_the_card_to_needs_retry(app, db, make, providers):  # noqa: F811
    card = make.requested_card("honcho")
    response = Htmx(app, card.member).post(
        f"/intents/{card.id}/setup", setup_form(card, **{"credentials-authorization": "wrong-key"})
    )
    assert response.status_code == 422
    row = card_row(db, card)
    assert row.status == "pending" and row.payload["phase"] == "needs_retry"
    assert len(actions(db, "tool_app.setup_failed")) == 1


def test_a_key_refused_through_the_api_moves_the_card_to_needs_retry(app, db, make, providers):  # noqa: F811
    card = make.requested_card("honcho")
    client = app.test_client()
    token = sign_in(client, card.member)
    response = client.post(
        f"/api/companies/{card.company.id}/tools/apps/connect",
        json={
            "appSlug": "honcho",
            "identity": "user",
            "methodConfig": {"workspaceId": "team"},
            "credentials": {"authorization": "wrong-key"},
            "interactionId": card.id,
        },
        headers={"X-CSRFToken": token},
    )
    assert response.status_code == 422, response.json
    row = card_row(db, card)
    assert row.status == "pending" and row.payload["phase"] == "needs_retry"
    [failure] = actions(db, "tool_app.setup_failed")
    assert failure.entity_id == response.json["connectionId"]


# --- the sign-in window --------------------------------------------------------------------------------------


def _start_for_card(browser: Browser, draft_id: str, card_id: str) -> str:
    response = browser.http.post(
        f"{browser.base}/api/tools/oauth/{draft_id}/start",
        json={"interactionId": card_id},
        headers={"X-CSRFToken": browser.csrf, "Origin": browser.base},
        timeout=10,
    )
    assert response.status_code == 200, response.text
    return response.json()["authorizationUrl"]


def test_reloading_a_successful_callback_says_the_request_is_connected(live, db, make):  # noqa: F811
    card = make.requested_card(OAUTH_APP)
    member = Browser(live, card.member)
    draft_id = member.create_draft(card.company, interactionId=card.id)
    callback_url = member.authorize(_start_for_card(member, draft_id, card.id))
    first = member.callback(callback_url)
    assert first.status_code == 200 and "<h1>Connected</h1>" in first.text

    reloaded = member.callback(callback_url)

    assert reloaded.status_code == 200, reloaded.text
    assert "<h1>Connected</h1>" in reloaded.text
    assert "Nothing was connected" not in reloaded.text
    message = opener_message(reloaded)
    assert (message["interactionId"], message["outcome"]) == (str(card.id), "connected")
    assert card_row(db, card).status == "accepted"


def test_a_failed_sign_in_is_recorded_when_its_person_lost_the_right_to_finish_it(live, db, make):  # noqa: F811
    card = make.requested_card(OAUTH_APP)
    member = Browser(live, card.member)
    draft_id = member.create_draft(card.company, interactionId=card.id)
    callback_url = member.authorize(_start_for_card(member, draft_id, card.id))
    # Meanwhile an owner makes the member a viewer: they may no longer configure the connection.
    memberships = {
        m.user_id: m
        for m in db.session.scalars(select(Membership).where(Membership.company_id == card.company.id))
    }
    change_member(memberships[card.owner.id], memberships[card.member.id], role="viewer")
    db.session.commit()

    page = member.callback(callback_url)

    assert page.status_code in (200, 403, 409), page.text
    assert "<h1>Connected</h1>" not in page.text
    [failure] = actions(db, "tool_app.oauth_failed")
    assert failure.details == {"reason": "forbidden", "interactionId": card.id}
    assert failure.actor_id == str(card.member.id) and failure.entity_id == draft_id
    assert db.session.get(ToolConnection, uuid.UUID(draft_id)).status == "draft"
    assert card_row(db, card).status != "accepted"


# --- an answered card and a broken connection ------------------------------------------------------------


def test_an_accepted_card_whose_connection_broke_gets_a_new_card_for_the_repair(app, db, make):
    card = make.requested_card("honcho")
    connection = make.connection(
        card.company,
        slug="honcho",
        name="Honcho",
        grants=[("user", card.member)],
        installed=False,
        tools={"search_memory": "allow"},
    )
    resolution.complete_intent(uuid.UUID(card.id), card.member.id, connection.id)
    db.session.commit()
    client = app.test_client()
    assert request_service(client, card.token, "honcho").json["state"] == "ready"
    connection.health_status = "needs_attention"  # the connection broke after the card was accepted
    db.session.commit()

    again = request_service(client, card.token, "honcho")

    assert again.status_code == 200, again.json
    repair_id = again.json["interactionId"]
    assert repair_id != card.id and again.json["state"] == "needs_user_action"
    assert again.json["instruction"] == (
        f"The connection your earlier request ({card.id}) gave is not usable any more, so a new connection card "
        "asks the responsible user to repair it. End this run and wait for continuation."
    )
    db.session.expire_all()
    cards = db.session.scalars(
        select(ThreadInteraction)
        .where(ThreadInteraction.issue_id == card.issue.id)
        .order_by(ThreadInteraction.created_at)
    ).all()
    assert [(str(c.id), c.status) for c in cards] == [(card.id, "accepted"), (repair_id, "pending")]
    assert cards[1].idempotency_key == f"{cards[0].idempotency_key}:repair:{card.id}"
    # Asked once more: the same repair card, said the same way.
    assert request_service(client, card.token, "honcho").json == again.json


def test_a_declined_card_is_not_replaced_under_the_same_key(app, db, make):
    card = make.requested_card("honcho")
    resolution.decline_intent(uuid.UUID(card.id), card.member.id, "Not now")
    db.session.commit()

    again = request_service(app.test_client(), card.token, "honcho")

    assert again.status_code == 409, again.json
    assert again.json["error"] == DECLINED
    db.session.expire_all()
    cards = db.session.scalars(
        select(ThreadInteraction).where(ThreadInteraction.issue_id == card.issue.id)
    ).all()
    assert [(str(c.id), c.status) for c in cards] == [(card.id, "rejected")]
