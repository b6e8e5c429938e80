"""The connection card's htmx endpoints: every state's labels, who sees controls, Not now, Use <name>, the dialog
hosting the shared setup flow (API key against a real MCP peer), fragments, CSRF, and no secrets in any card HTML."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from app.models import ConnectionIntentDelivery, Issue, ThreadInteraction, ToolConnection, WakeupRequest
from app.models.base import as_utc, utcnow
from tests.conftest import sign_in
from tests.peers.mcp_servers import HONCHO_KEY
from tests.services.runtime import test_runtime_rest
from tests.services.runtime.test_runtime_rest import connect, honcho_body
from tests.web.api.test_intents_api import open_honcho_card

providers = test_runtime_rest.providers  # the shared fixture

INTRO = (
    "Connect your own Honcho account, or let Builder use a Honcho connection that is already set up. "
    "An existing connection is added for Builder only; a new one is shared with the agents you choose."
)
RETRY_NOTE = "Authorization did not finish"


@pytest.fixture
def card(app, db, make):
    return open_honcho_card(app, db, make, "/intents")


class Htmx:
    """A signed-in browser that makes htmx requests (HX-Request plus the body's CSRF header)."""

    def __init__(self, app, user):
        self.client = app.test_client()
        self.csrf = sign_in(self.client, user)

    def get(self, url, **headers):
        return self.client.get(url, headers={"HX-Request": "true", **headers})

    def post(self, url, data=None, *, csrf=True, htmx=True):
        headers = {"HX-Request": "true"} if htmx else {}
        if csrf:
            headers["X-CSRFToken"] = self.csrf
        return self.client.post(url, data=data or {}, headers=headers)


def interaction(db, card) -> ThreadInteraction:
    db.session.expire_all()
    return db.session.get(ThreadInteraction, uuid.UUID(card.id))


def set_state(db, card, *, status="pending", phase=None, result=None):
    row = interaction(db, card)
    row.status = status
    if phase:
        row.payload = {**row.payload, "phase": phase}
    row.result = result
    row.resolved_at = None if status == "pending" else utcnow()
    db.session.commit()


def assert_fragment(response):
    body = response.get_data(as_text=True)
    assert "<html" not in body.lower() and "<!doctype" not in body.lower()
    return body


STATES = [
    ("requested", dict(phase="requested"), ["Connect", "Not now"], []),
    ("authorizing", dict(phase="authorizing"), ["Continue setup"], ["Not now", RETRY_NOTE]),
    # Issue 12, item 7: after a failed attempt the person can still decline (Not now beside Try again).
    ("needs_retry", dict(phase="needs_retry"), ["Try again", RETRY_NOTE, "Not now"], ["Setup saved"]),
    (
        "accepted",
        dict(status="accepted", result={"version": 1, "outcome": "connected", "connectionId": "x"}),
        ["Honcho connected"],
        ["Connect<", "Not now"],
    ),
    (
        "declined",
        dict(status="rejected", result={"version": 1, "outcome": "declined", "reason": None}),
        ["Connection declined"],
        ["Not now"],
    ),
    (
        "superseded",
        dict(
            status="expired", result={"version": 1, "outcome": "superseded", "supersededByInteractionId": "y"}
        ),
        ["Request superseded"],
        ["Not now"],
    ),
    (
        "expired",
        dict(
            status="expired",
            result={"version": 1, "outcome": "expired", "reason": "The task assignment changed"},
        ),
        ["Connection request expired"],
        ["Not now"],
    ),
    (
        "issue_closed",
        dict(status="expired", result={"version": 1, "outcome": "issue_closed", "reason": None}),
        ["Connection request expired"],
        ["Not now"],
    ),
]


@pytest.mark.parametrize("name,state,shown,hidden", STATES, ids=[s[0] for s in STATES])
def test_the_card_renders_each_state(app, db, card, name, state, shown, hidden):
    set_state(db, card, **state)
    response = Htmx(app, card.member).get(f"{card.url}/card")
    assert response.status_code == 200
    body = assert_fragment(response)
    assert "Builder needs Honcho" in body and INTRO in body and "/static/img/apps/honcho.svg" in body
    assert f'id="intent-card-{card.id}"' in body
    asked = as_utc(db.session.get(ThreadInteraction, uuid.UUID(card.id)).created_at)
    assert (
        f'<p class="muted connection-card-asked"><small>Builder asked at <time datetime="{asked.isoformat()}">'
        f"{asked:%Y-%m-%d %H:%M} UTC</time>, to go on with this task.</small></p>"
    ) in body
    for text in shown:
        assert text in body, text
    for text in hidden:
        assert text not in body, text
    assert "Waiting for" not in body
    assert ("<button" in body) == (name in ("requested", "authorizing", "needs_retry"))


def test_task_page_shows_the_card_and_a_pending_card_of_a_closed_task_as_expired(app, db, card):
    page = Htmx(app, card.member).client.get(f"/tasks/{card.issue.id}")
    body = page.get_data(as_text=True)
    assert page.status_code == 200 and "Builder needs Honcho" in body and ">Connect</button>" in body
    issue = db.session.get(Issue, card.issue.id)
    issue.status = "done"
    db.session.commit()
    body = Htmx(app, card.member).get(f"{card.url}/card").get_data(as_text=True)
    assert "Connection request expired" in body and "<button" not in body


@pytest.mark.parametrize("phase", ["requested", "authorizing", "needs_retry"])
def test_anyone_else_sees_only_who_it_waits_for(app, db, card, phase):
    set_state(db, card, phase=phase)
    viewer = Htmx(app, card.owner)
    body = assert_fragment(viewer.get(f"{card.url}/card"))
    assert f"Waiting for {card.member.name}" in body
    assert "<button" not in body and "<form" not in body and "dialog" not in body.replace("data-", "")
    page = viewer.client.get(f"/tasks/{card.issue.id}").get_data(as_text=True)
    assert f"Waiting for {card.member.name}" in page and "Not now" not in page
    # The dialog (and so the setup options) is refused to them; so is every action.
    assert viewer.get(f"{card.url}/dialog").status_code == 403
    for path in ("decline", f"use/{uuid.uuid4()}", "phase", "setup"):
        assert viewer.post(f"{card.url}/{path}", {"phase": "authorizing"}).status_code == 403
    assert interaction(db, card).status == "pending"


def test_other_companies_and_unknown_cards_are_not_found(app, make, card):
    outsider = Htmx(app, make.member(make.company("Other"), "owner"))
    assert outsider.get(f"{card.url}/card").status_code == 404
    assert outsider.get(f"{card.url}/dialog").status_code == 404
    assert outsider.post(f"{card.url}/decline").status_code == 404
    assert Htmx(app, card.member).get(f"/intents/{uuid.uuid4()}/card").status_code == 404
    assert app.test_client().get(f"{card.url}/card").status_code in (302, 401)


def test_not_now_declines_once_and_a_second_click_is_a_no_op(app, db, card):
    me = Htmx(app, card.member)
    first = me.post(f"{card.url}/decline")
    assert first.status_code == 200
    body = assert_fragment(first)
    assert "Connection declined" in body and "<button" not in body
    assert first.headers["HX-Retarget"] == f"#intent-card-{card.id}"
    second = me.post(f"{card.url}/decline")
    assert second.status_code == 200 and "Connection declined" in second.get_data(as_text=True)
    row = interaction(db, card)
    assert row.status == "rejected" and row.result == {"version": 1, "outcome": "declined", "reason": None}
    assert len(db.session.scalars(select(ConnectionIntentDelivery)).all()) == 1
    wakes = db.session.scalars(select(WakeupRequest)).all()
    assert [w.idempotency_key for w in wakes] == [f"connection-intent:{card.id}:declined"]


def test_not_now_without_javascript_redirects_back_to_the_task(app, db, card):
    me = Htmx(app, card.member)
    response = me.post(f"{card.url}/decline", htmx=False)
    assert response.status_code == 303
    assert response.headers["Location"].endswith(f"/tasks/{card.issue.id}#intent-card-{card.id}")
    assert interaction(db, card).status == "rejected"


def test_csrf_is_required_on_every_post(app, db, card):
    me = Htmx(app, card.member)
    for path in ("decline", f"use/{uuid.uuid4()}", "phase", "setup"):
        assert me.post(f"{card.url}/{path}", {"phase": "authorizing"}, csrf=False).status_code == 400
    assert interaction(db, card).status == "pending"


def test_the_dialog_offers_use_name_and_the_shared_setup_flow(app, db, card, providers):
    mine = connect(
        app, card.member, card.company, honcho_body("user", audience={"allAgents": False, "agentIds": []})
    )
    response = Htmx(app, card.member).get(f"{card.url}/dialog")
    assert response.status_code == 200
    body = assert_fragment(response)
    assert f"Use {mine['name']}" in body
    # Whose account the reuse acts with (the member's own; the provider named no account).
    assert (
        f'<button type="submit">Use {mine["name"]}</button>\n          <small class="muted">Your connection</small>'
        in body
    )
    assert f'action="/intents/{card.id}/use/{mine["id"]}"' in body
    assert 'id="setup-flow"' in body and f'action="/intents/{card.id}/setup"' in body
    assert 'hx-target="#setup-flow"' in body
    # The requesting agent is always part of a new connection's audience.
    # The requesting agent is locked into the audience: carried by a hidden input, shown checked and disabled.
    assert f'<input type="hidden" name="agent_ids" value="{card.agent.id}">' in body
    assert "asked for this connection, so it always gets access." in body
    for leak in (HONCHO_KEY, "127.0.0.1", "serverUrl"):
        assert leak not in body


def test_the_dialog_names_whose_connection_a_reuse_uses_and_its_account(app, db, card, providers):
    company_wide = connect(app, card.owner, card.company, honcho_body())
    connection = db.session.get(ToolConnection, uuid.UUID(company_wide["id"]))
    connection.provider_account_label = "Acme workspace"
    db.session.commit()
    body = assert_fragment(Htmx(app, card.member).get(f"{card.url}/dialog"))
    assert (
        f'<button type="submit">Use {company_wide["name"]}</button>\n'
        '          <small class="muted">The organization&#39;s connection, account Acme workspace</small>'
    ) in body
    assert "Use a connection that is already set up" in body


def test_use_name_completes_the_card_with_an_existing_connection(app, db, card, providers):
    mine = connect(
        app, card.member, card.company, honcho_body("user", audience={"allAgents": False, "agentIds": []})
    )
    response = Htmx(app, card.member).post(f"{card.url}/use/{mine['id']}")
    assert response.status_code == 200, response.get_data(as_text=True)
    body = assert_fragment(response)
    assert "Honcho connected" in body and response.headers["HX-Reswap"] == "outerHTML"
    row = interaction(db, card)
    assert row.status == "accepted" and row.result["connectionId"] == mine["id"]
    wakes = db.session.scalars(select(WakeupRequest)).all()
    assert [w.idempotency_key for w in wakes] == [f"connection-intent:{card.id}:connected"]


def test_a_failed_use_keeps_the_dialog_open_with_an_alert(app, db, card, providers):
    mine = connect(
        app, card.member, card.company, honcho_body("user", audience={"allAgents": False, "agentIds": []})
    )
    connection = db.session.get(ToolConnection, uuid.UUID(mine["id"]))
    connection.health_status = "needs_attention"
    db.session.commit()
    response = Htmx(app, card.member).post(f"{card.url}/use/{mine['id']}")
    assert response.status_code == 422
    body = assert_fragment(response)
    assert 'role="alert"' in body and "Finish and test this connection before using it for the task" in body
    assert response.headers["HX-Retarget"] == f"#intent-dialog-{card.id}-body"
    assert interaction(db, card).status == "pending"


def setup_form(card, **extra):
    return {
        "method_key": "mcp-api-key",
        "identity": "user",
        "credentials-authorization": HONCHO_KEY,
        "config-workspaceId": "team",
        "audience": "selected",
        "agent_ids": [str(card.agent.id)],
        **extra,
    }


def test_setup_in_the_dialog_connects_with_an_api_key_and_completes_the_card(app, db, card, providers):
    response = Htmx(app, card.member).post(f"{card.url}/setup", setup_form(card))
    assert response.status_code == 200, response.get_data(as_text=True)
    body = assert_fragment(response)
    assert "Honcho connected" in body and response.headers["HX-Retarget"] == f"#intent-card-{card.id}"
    assert HONCHO_KEY not in body
    row = interaction(db, card)
    assert row.status == "accepted"
    connection = db.session.get(ToolConnection, uuid.UUID(row.result["connectionId"]))
    assert connection.status == "active" and connection.app_slug == "honcho"


def test_setup_refuses_an_audience_without_the_requesting_agent(app, db, make, card, providers):
    other = make.agent(card.company, "Other")
    response = Htmx(app, card.member).post(
        f"{card.url}/setup", setup_form(card, agent_ids=[str(other.id)]), htmx=True
    )
    assert response.status_code == 422
    body = assert_fragment(response)
    assert "Keep Builder selected" in body and 'id="setup-flow"' in body
    assert HONCHO_KEY not in body
    assert db.session.scalars(select(ToolConnection)).all() == []
    assert interaction(db, card).status == "pending"


def test_a_refused_key_keeps_the_draft_and_the_card_pending(app, db, card, providers):
    response = Htmx(app, card.member).post(
        f"{card.url}/setup", setup_form(card, **{"credentials-authorization": "wrong-key"})
    )
    assert response.status_code == 422
    body = assert_fragment(response)
    assert 'role="alert"' in body and "Honcho refused the credentials." in body and "wrong-key" not in body
    assert 'name="draft_id"' in body
    assert interaction(db, card).status == "pending"
    # The card says the key was refused and what to do next.
    card_html = Htmx(app, card.member).get(card.url + "/card").get_data(as_text=True)
    assert (
        "Honcho refused the key, so nothing was connected. Try again with another key or choose another method."
        in card_html
    )


def test_phase_is_server_authored_and_answers_the_card(app, db, card):
    me = Htmx(app, card.member)
    response = me.post(f"{card.url}/phase", {"phase": "needs_retry"})
    assert response.status_code == 200 and "Try again" in response.get_data(as_text=True)
    # The page asks for needs_retry only when the sign-in window closed before the provider answered.
    assert (
        "The sign-in window was closed before Honcho answered, so nothing was connected. Try again or choose "
        "another method." in response.get_data(as_text=True)
    )
    assert me.post(f"{card.url}/phase", {"phase": "connected"}).status_code == 422
    assert interaction(db, card).payload["phase"] == "needs_retry"
    assert me.post(f"{card.url}/phase", {"phase": "requested"}).status_code == 200
    assert "lastFailure" not in interaction(db, card).payload


def test_dialog_without_javascript_is_a_page(app, db, card, providers):
    me = Htmx(app, card.member)
    page = me.client.get(f"{card.url}/dialog")
    body = page.get_data(as_text=True)
    assert page.status_code == 200 and "<html" in body and 'id="setup-flow"' in body
    assert 'hx-target="#setup-flow"' not in body
    done = me.post(f"{card.url}/setup", setup_form(card), htmx=False)
    assert done.status_code == 303 and done.headers["Location"].endswith(f"#intent-card-{card.id}")
    assert interaction(db, card).status == "accepted"


def test_no_card_html_ever_holds_credentials_or_urls(app, db, card, providers):
    """Raw bytes of every card state and the dialog, after a connection with a key exists."""
    mine = connect(app, card.member, card.company, honcho_body("user"))
    me, other = Htmx(app, card.member), Htmx(app, card.owner)
    pages = [
        me.get(f"{card.url}/card").data,
        other.get(f"{card.url}/card").data,
        me.get(f"{card.url}/dialog").data,
        me.client.get(f"/tasks/{card.issue.id}").data,
    ]
    pages.append(me.post(f"{card.url}/use/{mine['id']}").data)
    pages.append(other.get(f"{card.url}/card").data)
    for raw in pages:
        for leak in (
            HONCHO_KEY.encode(),
            b"authorizationUrl",
            b"oauth/authorize",
            b"code_challenge",
            b"127.0.0.1:",
        ):
            assert leak not in raw


def test_a_refused_key_in_the_dialog_is_logged_as_a_failed_setup_like_the_apps_page(app, db, card, providers):
    from app.models import ActivityLog

    response = Htmx(app, card.member).post(
        f"{card.url}/setup", setup_form(card, **{"credentials-authorization": "wrong-key"})
    )
    assert response.status_code == 422
    db.session.expire_all()
    logged = db.session.scalars(select(ActivityLog).order_by(ActivityLog.created_at)).all()
    failures = [row for row in logged if row.action == "tool_app.setup_failed"]
    assert len(failures) == 1 and "tool_app.connected" not in [row.action for row in logged]
    assert failures[0].details["app"] == "honcho" and "wrong-key" not in str(failures[0].details)
    draft = db.session.scalar(select(ToolConnection))
    assert draft.status == "draft" and failures[0].entity_id == str(draft.id)


def disconnected_honcho(app, db, card) -> str:
    """Honcho set up by the card's addressee, then Disconnected (credentials erased, the connection kept)."""
    from app.models import Membership
    from app.services.management.lifecycle import disconnect_connection

    cid = connect(app, card.member, card.company, honcho_body(identity="user"))["id"]
    membership = db.session.scalar(
        select(Membership).where(
            Membership.user_id == card.member.id, Membership.company_id == card.company.id
        )
    )
    disconnect_connection(membership, db.session.get(ToolConnection, uuid.UUID(cid)))
    db.session.commit()
    return cid


def test_a_disconnected_connection_is_offered_as_reconnect_and_keeps_its_id(app, db, card, providers):
    cid = disconnected_honcho(app, db, card)
    me = Htmx(app, card.member)
    body = me.get(f"{card.url}/dialog").get_data(as_text=True)
    assert f'action="/intents/{card.id}/reconnect/{cid}"' in body and "Reconnect Honcho" in body
    assert f'action="/intents/{card.id}/setup"' not in body

    response = me.post(f"{card.url}/reconnect/{cid}", {"credentials-authorization": HONCHO_KEY})
    assert response.status_code == 200, response.get_data(as_text=True)
    assert "Honcho connected" in assert_fragment(response)
    row = interaction(db, card)
    assert row.status == "accepted" and row.result["connectionId"] == cid
    connections = db.session.scalars(select(ToolConnection)).all()
    assert [(str(c.id), c.name, c.status) for c in connections] == [(cid, "Honcho", "active")]


def test_a_refused_key_on_reconnect_is_logged_and_the_connection_stays_disconnected(app, db, card, providers):
    from app.models import ActivityLog

    cid = disconnected_honcho(app, db, card)
    response = Htmx(app, card.member).post(
        f"{card.url}/reconnect/{cid}", {"credentials-authorization": "wrong"}
    )
    assert response.status_code == 422
    body = assert_fragment(response)
    assert "Honcho refused the credentials." in body and f"/intents/{card.id}/reconnect/{cid}" in body
    db.session.expire_all()
    assert db.session.get(ToolConnection, uuid.UUID(cid)).status == "disconnected"
    assert interaction(db, card).status == "pending"
    failures = db.session.scalars(
        select(ActivityLog).where(ActivityLog.action == "tool_app.setup_failed")
    ).all()
    assert [f.entity_id for f in failures] == [cid]
    # Another connection's id is not reconnected from this card.
    other = Htmx(app, card.member).post(
        f"{card.url}/reconnect/{uuid.uuid4()}", {"credentials-authorization": "x"}
    )
    assert other.status_code == 404
