"""A card-bound draft is finished only by the card's addressee, and a card never accepts a grant without
credentials (issue 26 item 4).

Seen live: a manager finished the addressee's draft from its Permissions page with the manager's own tokens; the card
stayed pending, and the addressee then "connected" the card with their own personal grant, which held nothing.
"""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from app.core.errors import Conflict
from app.models import ConnectionGrant, GrantSecret, OAuthState, ThreadInteraction, ToolConnection
from app.services.connections.card_binding import CARD_DRAFT_NOT_YOURS
from app.services.intents import resolution
from tests.conftest import sign_in
from tests.peers.mcp_servers import HONCHO_KEY
from tests.services.oauth.test_oauth import APP_SLUG as OAUTH_APP
from tests.services.oauth.test_oauth import Browser, live  # noqa: F401  (the live-server fixture)

NO_CREDENTIALS = (
    "The identity this agent would use on this connection holds no credentials. "
    "Sign in or enter the key again before continuing."
)


def api(client, token, method, url, body=None):
    return client.open(url, method=method, json=body, headers={"X-CSRFToken": token})


@pytest.fixture
def card(make):
    """A Honcho card addressed to the member (the task's responsible person); the owner manages connections."""
    return make.requested_card("honcho")


def _member_draft(app, card) -> tuple[object, str, str]:
    """The member starts a draft from the card (bound to it, no key yet); returns their client, token, draft id."""
    client = app.test_client()
    token = sign_in(client, card.member)
    response = api(
        client,
        token,
        "POST",
        f"/api/companies/{card.company.id}/tools/apps/connect",
        {
            "appSlug": "honcho",
            "identity": "user",
            "methodConfig": {"workspaceId": "team-workspace"},
            "interactionId": card.id,
        },
    )
    assert response.status_code == 201, response.json
    assert response.json["status"] == "draft"
    return client, token, response.json["id"]


def test_a_manager_cannot_finish_the_addressees_card_draft(app, db, card, providers):
    member_client, member_token, draft_id = _member_draft(app, card)
    manager = app.test_client()
    manager_token = sign_in(manager, card.owner)

    refused = api(
        manager,
        manager_token,
        "POST",
        f"/api/companies/{card.company.id}/tools/apps/{draft_id}/finish",
        {"credentials": {"authorization": HONCHO_KEY}},
    )

    assert refused.status_code == 403, refused.json
    assert refused.json["error"] == CARD_DRAFT_NOT_YOURS
    db.session.expire_all()
    assert db.session.get(ToolConnection, uuid.UUID(draft_id)).status == "draft"
    assert db.session.scalars(select(GrantSecret)).all() == []
    assert db.session.get(ThreadInteraction, uuid.UUID(card.id)).status == "pending"

    # The addressee finishes it: the card resolves with their own key.
    finished = api(
        member_client,
        member_token,
        "POST",
        f"/api/companies/{card.company.id}/tools/apps/{draft_id}/finish",
        {"credentials": {"authorization": HONCHO_KEY}},
    )
    assert finished.status_code == 200, finished.json
    db.session.expire_all()
    row = db.session.get(ThreadInteraction, uuid.UUID(card.id))
    assert row.status == "accepted" and row.result["connectionId"] == draft_id
    [grant] = db.session.scalars(
        select(ConnectionGrant).where(ConnectionGrant.connection_id == uuid.UUID(draft_id))
    )
    assert grant.subject_user_id == card.member.id


def test_a_manager_cannot_sign_in_on_the_addressees_card_draft(live, db, make):  # noqa: F811
    """The OAuth sign-in (Permissions page button and JSON start) refuses before any provider sign-in, and nothing
    the manager holds reaches the draft."""
    card = make.requested_card(OAUTH_APP)
    member = Browser(live, card.member)
    draft_id = member.create_draft(card.company, interactionId=card.id)
    manager = Browser(live, card.owner)

    page = manager.http.post(
        f"{live}/apps/{draft_id}/oauth/start",
        data={"csrf_token": manager.csrf},
        allow_redirects=False,
        timeout=10,
    )
    assert page.status_code == 403 and CARD_DRAFT_NOT_YOURS in page.text
    started = manager.http.post(
        f"{live}/api/tools/oauth/{draft_id}/start", json={}, headers={"X-CSRFToken": manager.csrf}, timeout=10
    )
    assert started.status_code == 403 and started.json()["error"] == CARD_DRAFT_NOT_YOURS
    db.session.expire_all()
    assert db.session.get(ToolConnection, uuid.UUID(draft_id)).status == "draft"
    assert db.session.scalars(select(OAuthState)).all() == []

    # The addressee signs in: the card resolves with their own tokens.
    response = member.callback(member.authorize(member.start(draft_id)))
    assert response.status_code == 200, response.text
    db.session.expire_all()
    assert db.session.get(ThreadInteraction, uuid.UUID(card.id)).status == "accepted"


def test_completion_refuses_a_personal_grant_without_credentials(db, make, card):
    """The addressee's grant on an active connection holds no credentials (another person's sign-in activated it):
    the card is not connected with it, and nothing of the attempt is kept."""
    connection = make.connection(
        card.company,
        slug="honcho",
        name="Honcho",
        grants=[("user", card.owner)],
        tools={"search_memory": "allow"},
    )
    make.grant(
        connection, "user", subject=card.member, credential=False
    )  # the addressee's, never given a key

    with pytest.raises(Conflict) as refused:
        resolution.complete_intent(uuid.UUID(card.id), card.member.id, connection.id)
    assert refused.value.message == NO_CREDENTIALS
    db.session.rollback()
    assert db.session.get(ThreadInteraction, uuid.UUID(card.id)).status == "pending"
