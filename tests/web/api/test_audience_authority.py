"""Nobody widens a connection's audience without `tools:manage_connections` (issue 26 item 9).

- A member cannot widen their personal connection through the API (PATCH), as they cannot in the card dialog.
- A draft made without the card and signed in for the card (JSON OAuth start) serves the requester alone.
- A card's sign-in whose saved audience leaves the requesting agent out is refused at the start.
"""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from app.models import ConnectionInstall, ThreadInteraction
from app.services.connections.audience import WIDEN_FORBIDDEN, Audience
from app.services.intents import setup as intent_setup
from app.services.tenancy import get_membership
from tests.conftest import sign_in
from tests.services.oauth.test_oauth import APP_SLUG as OAUTH_APP
from tests.services.oauth.test_oauth import Browser, live  # noqa: F401  (the live-server fixture)


def api(client, token, method, url, body=None):
    return client.open(url, method=method, json=body, headers={"X-CSRFToken": token})


def installs(db, connection_id) -> list[tuple[str, uuid.UUID]]:
    db.session.expire_all()
    rows = db.session.scalars(
        select(ConnectionInstall).where(ConnectionInstall.connection_id == connection_id)
    )
    return sorted((row.target_type, row.target_id) for row in rows)


@pytest.fixture
def personal(db, make, acme):
    """The member's personal connection, installed for Builder only (the member created it)."""
    company, _owner, member, _viewer, agent = acme
    connection = make.connection(
        company, slug="honcho", name="Honcho", grants=[("user", member)], install_for=agent
    )
    connection.created_by_user_id = member.id
    db.session.commit()
    return connection


def test_a_member_cannot_widen_their_personal_connection_through_the_api(
    app, client, db, make, acme, personal
):
    company, owner, member, _viewer, agent = acme
    other = make.agent(company, "Reviewer")
    token = sign_in(client, member)
    url = f"/api/tool-connections/{personal.id}"

    for wider in (
        {"allAgents": True, "agentIds": []},
        {"allAgents": False, "agentIds": [str(agent.id), str(other.id)]},
    ):
        refused = api(client, token, "PATCH", url, {"audience": wider})
        assert refused.status_code == 403, refused.json
        assert refused.json["error"] == WIDEN_FORBIDDEN
    assert installs(db, personal.id) == [("agent", agent.id)]

    # Narrowing stays theirs to do; a connection manager may widen.
    narrowed = api(client, token, "PATCH", url, {"audience": {"allAgents": False, "agentIds": []}})
    assert narrowed.status_code == 200, narrowed.json
    assert installs(db, personal.id) == []
    manager = app.test_client()
    manager_token = sign_in(manager, owner)
    widened = api(manager, manager_token, "PATCH", url, {"audience": {"allAgents": True, "agentIds": []}})
    assert widened.status_code == 200, widened.json
    assert installs(db, personal.id) == [("company", company.id)]


def json_start(browser: Browser, connection_id: str, interaction_id: str):
    return browser.http.post(
        f"{browser.base}/api/tools/oauth/{connection_id}/start",
        json={"interactionId": interaction_id},
        headers={"X-CSRFToken": browser.csrf, "Origin": browser.base},
        timeout=10,
    )


def test_a_draft_made_without_the_card_serves_only_the_requester(live, db, make):  # noqa: F811
    card = make.requested_card(OAUTH_APP)
    member = Browser(live, card.member)
    draft_id = member.create_draft(card.company)  # no interactionId: its own audience is company-wide
    started = json_start(member, draft_id, card.id)
    assert started.status_code == 200, started.text

    page = member.callback(member.authorize(started.json()["authorizationUrl"]))

    assert page.status_code == 200, page.text
    db.session.expire_all()
    assert db.session.get(ThreadInteraction, uuid.UUID(card.id)).status == "accepted"
    assert installs(db, uuid.UUID(draft_id)) == [("agent", card.agent.id)]


def test_a_sign_in_whose_audience_leaves_out_the_requester_is_refused(live, db, make):  # noqa: F811
    card = make.requested_card(OAUTH_APP)
    member = Browser(live, card.member)
    draft_id = member.create_draft(card.company, interactionId=card.id)
    # Save & exit may keep an incomplete choice on the card: no agent at all.
    membership = get_membership(card.company.id, card.member.id)
    from app.models import ToolConnection

    intent_setup.save_card_audience(
        uuid.UUID(card.id),
        membership,
        db.session.get(ToolConnection, uuid.UUID(draft_id)),
        Audience(False, ()),
        require_requester=False,
    )
    db.session.commit()

    refused = json_start(member, draft_id, card.id)

    assert refused.status_code == 400, refused.text
    assert refused.json()["details"] == [
        {
            "loc": ["audience", "agentIds"],
            "msg": "Keep Builder selected: it asked for this connection.",
            "type": "value_error",
        }
    ]
    db.session.expire_all()
    row = db.session.get(ThreadInteraction, uuid.UUID(card.id))
    assert row.status == "pending"
