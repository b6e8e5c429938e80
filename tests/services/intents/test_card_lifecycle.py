"""The connection card's lifecycle at its edges (issue 12): nothing outlives a card that stopped waiting, the card owns
the audience its addressee chose, every host that finishes a card's draft resolves the card in one transaction,
sharing beyond the requester needs authority, failures are honest, and a change of responsible person re-addresses.

OAuth cases run through the real redirects (live app, local OpenID Provider, OAuth-protected MCP peer); API-key
cases through the card dialog, the Apps pages and the JSON API against a real MCP peer.
"""

from __future__ import annotations

import re
import uuid

import pytest
from sqlalchemy import select

from app.models import (
    ConnectionGrant,
    ConnectionInstall,
    OAuthState,
    ThreadInteraction,
    ToolConnection,
    WakeupRequest,
)
from app.services.connections.endpoint import stored_secrets
from app.services.intents.card import BROADEN_FORBIDDEN, RESPONSIBLE_CHANGED
from app.services.oauth.errors import CARD_CLOSED
from tests.doors import request_service
from tests.peers.mcp_servers import HONCHO_KEY
from tests.services.intents.test_intent_oauth import card as oauth_card  # noqa: F401 (the Linear card fixture)
from tests.services.intents.test_intent_oauth import opener_message, start_from_card
from tests.services.oauth.test_oauth import Browser, live  # noqa: F401 (the live-server fixture)
from tests.services.runtime.test_runtime_rest import board_api
from tests.web.api.test_intents_api import open_honcho_card
from tests.web.cards.test_intent_cards import Htmx, assert_fragment, setup_form
from tests.web.cards.test_intent_cards import providers as providers  # noqa: PLC0414 (the shared fixture)


def fresh(db, model, row_id):
    db.session.expire_all()
    return db.session.get(model, uuid.UUID(str(row_id)))


def installs_of(db, connection_id) -> set[tuple[str, str]]:
    db.session.expire_all()
    rows = db.session.scalars(
        select(ConnectionInstall).where(ConnectionInstall.connection_id == uuid.UUID(str(connection_id)))
    )
    return {(row.target_type, str(row.target_id)) for row in rows}


def assert_nothing_connected(db, connection_id) -> None:
    """No tokens or keys stored, no installs, still a draft."""
    connection = fresh(db, ToolConnection, connection_id)
    assert connection.status == "draft"
    assert installs_of(db, connection_id) == set()
    for grant in db.session.scalars(
        select(ConnectionGrant).where(ConnectionGrant.connection_id == connection.id)
    ):
        assert stored_secrets(grant) == {}


def states_for(db, interaction_id) -> list[OAuthState]:
    db.session.expire_all()
    return list(
        db.session.scalars(select(OAuthState).where(OAuthState.interaction_id == uuid.UUID(interaction_id)))
    )


def change_task(app, user, issue, field: str, value: str):
    client = Htmx(app, user)
    response = client.post(f"/tasks/{issue.id}/{field}", {field: value})
    assert response.status_code == 200, response.get_data(as_text=True)


# --- 1. an expired card's sign-in connects nothing -----------------------------------------------------------


def _close(app, db, make, card):
    company, member, owner, agent, issue, _ = card
    change_task(app, owner, issue, "status", "done")


def _reassign(app, db, make, card):
    company, member, owner, agent, issue, _ = card
    other = make.agent(company, "Other")
    change_task(app, owner, issue, "assignee", str(other.id))


def _supersede(app, db, make, card):
    """A request of the same agent addressed to someone else. The task's person changed outside the board (data
    from before hand-overs superseded cards), so only the request itself can supersede."""
    company, member, owner, agent, issue, _ = card
    db.session.get(type(issue), issue.id).responsible_user_id = owner.id
    db.session.commit()
    _, token = make.run(agent, issue)
    assert request_service(app.test_client(), token, "linear").json["state"] == "needs_user_action"


def _hand_over(app, db, make, card):
    company, member, owner, agent, issue, _ = card
    change_task(app, owner, issue, "responsible", str(owner.id))


EXPIRIES = {
    "task_closed": _close,
    "reassigned": _reassign,
    "superseded": _supersede,
    "responsible": _hand_over,
}


@pytest.mark.parametrize("expire", list(EXPIRIES), ids=list(EXPIRIES))
def test_a_sign_in_that_returns_after_the_card_stopped_waiting_connects_nothing(
    app,
    live,  # noqa: F811
    db,
    make,
    oauth_card,  # noqa: F811
    expire,
):
    company, member, _, _, _, interaction_id = oauth_card
    browser = Browser(live, member)
    connection_id = browser.create_draft(company)
    callback_url = browser.authorize(start_from_card(browser, connection_id, interaction_id))
    assert len(states_for(db, interaction_id)) == 1

    EXPIRIES[expire](app, db, make, oauth_card)

    assert states_for(db, interaction_id) == []
    assert fresh(db, ThreadInteraction, interaction_id).status == "expired"
    page = browser.callback(callback_url)
    assert page.status_code == 409
    assert CARD_CLOSED in page.text
    assert_nothing_connected(db, connection_id)
    assert db.session.scalars(select(WakeupRequest)).all() == []


def test_a_sign_in_cannot_start_for_a_card_that_stopped_waiting(app, live, db, make, oauth_card):  # noqa: F811
    company, member, _, _, issue, interaction_id = oauth_card
    _close(app, db, make, oauth_card)
    browser = Browser(live, member)
    connection_id = browser.create_draft(company)
    response = browser.http.post(
        f"{live}/apps/{connection_id}/oauth/start",
        data={"csrf_token": browser.csrf, "interaction_id": interaction_id},
        allow_redirects=False,
        timeout=10,
    )
    assert response.status_code == 409
    assert states_for(db, interaction_id) == []


@pytest.mark.postgres_only
def test_callback_racing_a_task_close_never_connects_a_closed_card(app, live, db, make):  # noqa: F811
    """Callback and close run together, several times: either the card was connected before the close, or the
    close won and nothing was stored. Never an expired card with tokens or installs."""
    import threading

    company = make.company("Race")
    member = make.member(company, "member")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Builder")
    browser = Browser(live, member)
    closer = Htmx(app, owner)
    outcomes = []
    for _ in range(4):
        issue = make.issue(company, status="in_progress", assignee=agent, responsible=member)
        _, token = make.run(agent, issue)
        interaction_id = request_service(app.test_client(), token, "linear").json["interactionId"]
        connection_id = browser.create_draft(company)
        callback_url = browser.authorize(start_from_card(browser, connection_id, interaction_id))
        barrier = threading.Barrier(2)
        answers = {}

        def callback(barrier=barrier, answers=answers, callback_url=callback_url):
            barrier.wait()
            answers["callback"] = browser.callback(callback_url).status_code

        thread = threading.Thread(target=callback)
        thread.start()
        barrier.wait()
        with app.app_context():
            answers["close"] = closer.post(f"/tasks/{issue.id}/status", {"status": "done"}).status_code
        thread.join(30)
        row = fresh(db, ThreadInteraction, interaction_id)
        connection = fresh(db, ToolConnection, connection_id)
        assert answers["close"] == 200
        if row.status == "accepted":
            assert answers["callback"] == 200 and connection.status == "active"
            assert ("agent", str(agent.id)) in installs_of(db, connection_id)
        else:
            assert row.status == "expired" and answers["callback"] in (400, 409)
            assert_nothing_connected(db, connection_id)
        assert states_for(db, interaction_id) == []
        outcomes.append(row.status)
    assert set(outcomes) <= {"accepted", "expired"}


# --- 2. the card owns its audience; every host finishes it ---------------------------------------------------


@pytest.fixture
def card(app, db, make):
    return open_honcho_card(app, db, make, "/intents")


def save_and_exit(app, card, **form):
    response = Htmx(app, card.member).post(
        f"{card.url}/setup", setup_form(card, intent="save", **{"credentials-authorization": ""}, **form)
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    return assert_fragment(response)


def saved_audience(db, card) -> dict:
    return fresh(db, ThreadInteraction, card.id).payload["audience"]


def test_save_and_exit_keeps_the_audience_on_the_card_and_grants_nothing(app, db, card, providers):
    body = save_and_exit(app, card)
    assert "Setup saved" in body and "Continue setup" in body and "Not now" in body
    saved = saved_audience(db, card)
    assert saved["allAgents"] is False and saved["agentIds"] == [str(card.agent.id)]
    draft_id = saved["connectionId"]
    assert_nothing_connected(db, draft_id)
    # The draft keeps no audience of its own: the card is the one owner.
    assert fresh(db, ToolConnection, draft_id).config["draftAudience"] == {"allAgents": False, "agentIds": []}
    assert fresh(db, ThreadInteraction, card.id).status == "pending"


def test_save_and_exit_may_keep_an_incomplete_choice(app, db, make, card, providers):
    save_and_exit(app, card, agent_ids=[])
    assert saved_audience(db, card)["agentIds"] == []


def owners_card(app, db, make):
    """A card addressed to the company's owner (who may share beyond the requester)."""
    company = make.company("Acme")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Builder")
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    _, token = make.run(agent, issue)
    interaction_id = request_service(app.test_client(), token, "honcho").json["interactionId"]
    return company, owner, agent, interaction_id


def test_continue_setup_restores_the_saved_draft_and_audience_then_finishes_it(app, db, make, providers):
    company, owner, agent, interaction_id = owners_card(app, db, make)
    helper = make.agent(company, "Helper")
    bystander = make.agent(company, "Bystander")
    me = Htmx(app, owner)
    form = {
        "method_key": "mcp-api-key",
        "identity": "user",
        "config-workspaceId": "team",
        "audience": "selected",
        "agent_ids": [str(agent.id), str(helper.id)],
    }
    saved = me.post(f"/intents/{interaction_id}/setup", {**form, "intent": "save"})
    assert saved.status_code == 200 and "Setup saved" in assert_fragment(saved)
    draft_id = fresh(db, ThreadInteraction, interaction_id).payload["audience"]["connectionId"]

    dialog = assert_fragment(me.get(f"/intents/{interaction_id}/dialog"))
    assert f'name="draft_id" value="{draft_id}"' in dialog
    # The saved setup is named as kept, and its method and identity stay choosable (checked as saved).
    assert 'id="setup-flow-kept"' in dialog and "is kept" in dialog
    assert re.search(r'name="identity" value="user" checked', dialog)
    assert f'name="agent_ids" value="{helper.id}" checked' in dialog
    assert f'name="agent_ids" value="{bystander.id}" >' in dialog

    response = me.post(
        f"/intents/{interaction_id}/setup",
        {**form, "draft_id": draft_id, "credentials-authorization": HONCHO_KEY},
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    row = fresh(db, ThreadInteraction, interaction_id)
    assert row.status == "accepted" and row.result["connectionId"] == draft_id
    assert db.session.scalars(select(ToolConnection)).all() == [fresh(db, ToolConnection, draft_id)]
    assert installs_of(db, draft_id) == {("agent", str(agent.id)), ("agent", str(helper.id))}


def test_finishing_a_cards_draft_on_the_permissions_page_resolves_the_card(app, db, card, providers):
    save_and_exit(app, card)
    draft_id = saved_audience(db, card)["connectionId"]
    me = Htmx(app, card.member)
    response = me.post(f"/apps/{draft_id}/reconnect", {"credentials-authorization": HONCHO_KEY}, htmx=False)
    assert response.status_code == 303, response.get_data(as_text=True)
    row = fresh(db, ThreadInteraction, card.id)
    assert row.status == "accepted" and row.result["connectionId"] == draft_id
    assert installs_of(db, draft_id) == {("agent", str(card.agent.id))}
    wakes = db.session.scalars(select(WakeupRequest)).all()
    assert [w.idempotency_key for w in wakes] == [f"connection-intent:{card.id}:connected"]


def test_finishing_a_cards_draft_through_the_json_api_resolves_the_card(app, db, card, providers):
    save_and_exit(app, card)
    draft_id = saved_audience(db, card)["connectionId"]
    response = board_api(
        app.test_client(),
        card.member,
        "POST",
        f"/api/companies/{card.company.id}/tools/apps/{draft_id}/finish",
        {"credentials": {"authorization": HONCHO_KEY}},
    )
    assert response.status_code == 200, response.json
    assert fresh(db, ThreadInteraction, card.id).status == "accepted"
    assert installs_of(db, draft_id) == {("agent", str(card.agent.id))}


def test_a_json_draft_for_a_card_defaults_to_the_requester_only(app, db, make, card, providers):
    make.agent(card.company, "Bystander")
    response = board_api(
        app.test_client(),
        card.member,
        "POST",
        f"/api/companies/{card.company.id}/tools/apps/connect",
        {
            "appSlug": "honcho",
            "identity": "user",
            "interactionId": card.id,
            "credentials": {"authorization": HONCHO_KEY},
            "methodConfig": {"workspaceId": "team"},
        },
    )
    assert response.status_code == 201, response.json
    connection_id = response.json["id"]
    assert fresh(db, ThreadInteraction, card.id).status == "accepted"
    assert installs_of(db, connection_id) == {("agent", str(card.agent.id))}


def test_a_cards_oauth_draft_finished_from_the_permissions_page_resolves_the_card(live, db, oauth_card):  # noqa: F811
    company, member, _, agent, _, interaction_id = oauth_card
    browser = Browser(live, member)
    connection_id = browser.create_draft(company, interactionId=interaction_id)
    # The Permissions page's Finish setup starts the sign-in without the card's id: the draft knows its card.
    response = browser.callback(browser.authorize(browser.start(connection_id)))
    assert opener_message(response)["outcome"] == "connected"
    row = fresh(db, ThreadInteraction, interaction_id)
    assert row.status == "accepted" and row.result["connectionId"] == connection_id
    assert installs_of(db, connection_id) == {("agent", str(agent.id))}
    wakes = db.session.scalars(select(WakeupRequest)).all()
    assert [w.idempotency_key for w in wakes] == [f"connection-intent:{interaction_id}:connected"]


# --- 5. broadening needs authority -----------------------------------------------------------------------------


def test_a_member_cannot_share_a_cards_connection_beyond_the_requester(app, db, make, card, providers):
    make.agent(card.company, "Bystander")
    for form in (
        {"audience": "all"},
        {"agent_ids": [str(card.agent.id), str(make.agent(card.company, "X").id)]},
    ):
        response = Htmx(app, card.member).post(f"{card.url}/setup", setup_form(card, **form))
        assert response.status_code == 422
        assert BROADEN_FORBIDDEN in assert_fragment(response)
        row = fresh(db, ThreadInteraction, card.id)
        assert row.status == "pending" and "audience" not in row.payload
    assert db.session.scalar(select(ConnectionInstall.id)) is None


def test_the_dialog_starts_a_member_from_the_requester_alone(app, db, make, card, providers):
    make.agent(card.company, "Bystander")
    dialog = assert_fragment(Htmx(app, card.member).get(f"{card.url}/dialog"))
    assert 'value="selected" checked' in dialog or 'checked value="selected"' in dialog


def test_a_manager_shares_a_cards_connection_with_all_agents_at_completion(app, db, make, providers):
    company, owner, agent, interaction_id = owners_card(app, db, make)
    form = {
        "method_key": "mcp-api-key",
        "identity": "user",
        "credentials-authorization": HONCHO_KEY,
        "config-workspaceId": "team",
        "audience": "all",
    }
    response = Htmx(app, owner).post(f"/intents/{interaction_id}/setup", form)
    assert response.status_code == 200, response.get_data(as_text=True)
    row = fresh(db, ThreadInteraction, interaction_id)
    assert row.status == "accepted"
    assert installs_of(db, row.result["connectionId"]) == {
        ("company", str(company.id)),
        ("agent", str(agent.id)),
    }


# --- 7. needs_retry is honest ----------------------------------------------------------------------------------


def test_a_refused_completion_keeps_nothing_and_moves_the_card_to_needs_retry(
    app, db, card, providers, honcho_server
):
    for name in ("search_memory", "save_memory", "list_workspaces"):
        honcho_server.remove_tool(name)  # the key works, but the connection offers no tool to permit
    me = Htmx(app, card.member)
    response = me.post(f"{card.url}/setup", setup_form(card))
    assert response.status_code == 422
    body = assert_fragment(response)
    assert "This connection has no permitted tools" in body and 'role="alert"' in body
    row = fresh(db, ThreadInteraction, card.id)
    assert row.status == "pending" and row.payload["phase"] == "needs_retry"
    assert_nothing_connected(db, row.payload["audience"]["connectionId"])
    card_html = assert_fragment(me.get(f"{card.url}/card"))
    assert "Try again" in card_html and "Not now" in card_html
    assert db.session.scalars(select(WakeupRequest)).all() == []


# --- 6. a new responsible person -------------------------------------------------------------------------------


def test_a_new_responsible_person_supersedes_old_cards_and_running_runs_follow(
    app, db, make, card, providers
):
    change_task(app, card.owner, card.issue, "responsible", str(card.owner.id))
    old = fresh(db, ThreadInteraction, card.id)
    assert old.status == "expired"
    assert old.result == {
        "version": 1,
        "outcome": "superseded",
        "supersededByInteractionId": None,
        "reason": RESPONSIBLE_CHANGED,
    }
    assert "Request superseded" in assert_fragment(Htmx(app, card.member).get(f"{card.url}/card"))
    # The run started before the change keeps its token and now asks the new person.
    response = request_service(app.test_client(), card.token, "honcho")
    assert response.status_code == 200, response.json
    new = fresh(db, ThreadInteraction, response.json["interactionId"])
    assert new.status == "pending" and new.addressee_user_id == card.owner.id and new.id != old.id


# --- 9. legacy cards -------------------------------------------------------------------------------------------


def legacy_card(db, card) -> ThreadInteraction:
    """A `request_confirmation` carrying `connectionAuthorization`, as connection requests were stored before."""
    row = ThreadInteraction(
        company_id=card.company.id,
        issue_id=card.issue.id,
        kind="request_confirmation",
        status="pending",
        title="Connect Honcho",
        payload={
            "connectionAuthorization": {
                "serviceSlug": "honcho",
                "serviceName": "Honcho",
                "requestingAgentId": str(card.agent.id),
                "requestingAgentName": "Builder",
            }
        },
        addressee_user_id=card.member.id,
        requesting_agent_id=card.agent.id,
    )
    db.session.add(row)
    db.session.commit()
    return row


def test_a_legacy_card_is_readable_in_the_thread_and_declinable(app, db, card, providers):
    legacy = legacy_card(db, card)
    me = Htmx(app, card.member)
    page = me.client.get(f"/tasks/{card.issue.id}").get_data(as_text=True)
    assert f'id="intent-card-{legacy.id}"' in page and "Builder needs Honcho" in page
    declined = me.post(f"/intents/{legacy.id}/decline")
    assert declined.status_code == 200 and "Connection declined" in assert_fragment(declined)
    row = fresh(db, ThreadInteraction, legacy.id)
    assert row.status == "rejected" and row.kind == "connection_intent"
    assert row.payload["serviceSlug"] == "honcho" and row.payload["legacy"]["kind"] == "request_confirmation"
    wakes = db.session.scalars(select(WakeupRequest)).all()
    assert f"connection-intent:{legacy.id}:declined" in [w.idempotency_key for w in wakes]


def test_a_legacy_card_connects_through_the_dialog(app, db, card, providers):
    legacy = legacy_card(db, card)
    me = Htmx(app, card.member)
    dialog = assert_fragment(me.get(f"/intents/{legacy.id}/dialog"))
    assert "Connect Honcho for Builder" in dialog
    response = me.post(f"/intents/{legacy.id}/setup", setup_form(card))
    assert response.status_code == 200, response.get_data(as_text=True)
    row = fresh(db, ThreadInteraction, legacy.id)
    assert row.status == "accepted" and row.result["outcome"] == "connected"
    assert installs_of(db, row.result["connectionId"]) == {("agent", str(card.agent.id))}


# --- issue 15: an answered card says who answered, when, and what becomes of the agent -----------------------


def test_an_answered_card_says_who_answered_when_and_whether_the_agent_continues(
    app, db, make, card, providers
):
    me = Htmx(app, card.member)
    connected = me.post(f"{card.url}/setup", setup_form(card))
    body = assert_fragment(connected)
    name = card.member.name
    assert f"Connected by {name} at <time datetime=" in body
    assert "UTC</time>. Builder will continue in a new session." in body
    # The task moves to another agent: the card now says the requester is not woken.
    change_task(app, card.owner, card.issue, "assignee", str(make.agent(card.company, "Other").id))
    later = assert_fragment(me.get(f"{card.url}/card"))
    assert "Builder is not assigned any more, so it is not woken." in later


def test_a_declined_card_says_who_declined(app, db, card):
    declined = assert_fragment(Htmx(app, card.member).post(f"{card.url}/decline"))
    assert (
        f"Declined by {card.member.name} at" in declined and "Builder will continue without it." in declined
    )


# --- issue 26, item 8: two cards on one draft --------------------------------------------------------------------


def two_cards_on_one_draft(app, db, make):
    """Builder asks its task's responsible person for Honcho on two tasks; the person saves the setup of each
    card (Save & exit), and both cards bind to the person's one Honcho draft."""
    company = make.company("Acme")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Builder")
    cards = []
    for _ in range(2):
        issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
        _, token = make.run(agent, issue)
        cards.append(request_service(app.test_client(), token, "honcho").json["interactionId"])
    me = Htmx(app, owner)
    form = {
        "method_key": "mcp-api-key",
        "identity": "user",
        "config-workspaceId": "team",
        "audience": "selected",
        "agent_ids": [str(agent.id)],
        "intent": "save",
    }
    for interaction_id in cards:
        saved = me.post(f"/intents/{interaction_id}/setup", form)
        assert saved.status_code == 200 and "Setup saved" in assert_fragment(saved)
    drafts = {fresh(db, ThreadInteraction, c).payload["audience"]["connectionId"] for c in cards}
    assert len(drafts) == 1, "both cards continue the person's one draft"
    return owner, agent, cards, drafts.pop()


def assert_both_connected(app, db, owner, agent, cards, draft_id):
    for interaction_id in cards:
        row = fresh(db, ThreadInteraction, interaction_id)
        assert row.status == "accepted" and row.result == {
            "version": 1,
            "outcome": "connected",
            "connectionId": draft_id,
        }
        body = assert_fragment(Htmx(app, owner).get(f"/intents/{interaction_id}/card"))
        assert "Setup saved" not in body and "Continue setup" not in body and "Honcho connected" in body
    assert installs_of(db, draft_id) == {("agent", str(agent.id))}
    keys = sorted(w.idempotency_key for w in db.session.scalars(select(WakeupRequest)))
    assert keys == sorted(f"connection-intent:{c}:connected" for c in cards)


def test_finishing_a_draft_two_cards_wait_on_resolves_both_from_the_permissions_page(
    app, db, make, providers
):
    owner, agent, cards, draft_id = two_cards_on_one_draft(app, db, make)
    response = Htmx(app, owner).post(
        f"/apps/{draft_id}/reconnect", {"credentials-authorization": HONCHO_KEY}, htmx=False
    )
    assert response.status_code == 303, response.get_data(as_text=True)
    from app.workers.continuations import sweep_pending

    sweep_pending()
    assert_both_connected(app, db, owner, agent, cards, draft_id)


def test_finishing_a_draft_two_cards_wait_on_from_one_cards_dialog_shows_that_card_and_resolves_both(
    app, db, make, providers
):
    owner, agent, cards, draft_id = two_cards_on_one_draft(app, db, make)
    second = cards[1]
    response = Htmx(app, owner).post(
        f"/intents/{second}/setup",
        {
            "method_key": "mcp-api-key",
            "identity": "user",
            "config-workspaceId": "team",
            "audience": "selected",
            "agent_ids": [str(agent.id)],
            "draft_id": draft_id,
            "credentials-authorization": HONCHO_KEY,
        },
    )
    assert response.status_code == 200, response.get_data(as_text=True)
    assert response.headers["HX-Retarget"] == f"#intent-card-{second}"
    assert f'id="intent-card-{second}"' in assert_fragment(response)
    from app.workers.continuations import sweep_pending

    sweep_pending()
    assert_both_connected(app, db, owner, agent, cards, draft_id)


def test_a_card_the_finished_draft_cannot_serve_keeps_waiting_without_a_stale_saved_setup(
    app, db, make, providers
):
    owner, agent, cards, draft_id = two_cards_on_one_draft(app, db, make)
    # The second card's saved audience names an agent that has left the company since: its completion is refused.
    second = fresh(db, ThreadInteraction, cards[1])
    saved = dict(second.payload["audience"])
    saved["agentIds"] = [*saved["agentIds"], str(uuid.uuid4())]
    second.payload = {**second.payload, "audience": saved}
    db.session.commit()
    response = Htmx(app, owner).post(
        f"/apps/{draft_id}/reconnect", {"credentials-authorization": HONCHO_KEY}, htmx=False
    )
    assert response.status_code == 303, response.get_data(as_text=True)
    assert fresh(db, ThreadInteraction, cards[0]).status == "accepted"
    waiting = fresh(db, ThreadInteraction, cards[1])
    assert waiting.status == "pending" and "audience" not in waiting.payload
    body = assert_fragment(Htmx(app, owner).get(f"/intents/{cards[1]}/card"))
    assert "Setup saved" not in body and "Continue setup" not in body
    keys = [w.idempotency_key for w in db.session.scalars(select(WakeupRequest))]
    assert keys == [f"connection-intent:{cards[0]}:connected"]


# --- issue 26, item 3: legacy cards follow the card lifecycle ---------------------------------------------------


def resolved_webhooks(db, card) -> list[dict]:
    """The `connection_intent.resolved` webhook deliveries queued for the company (a subscribed endpoint)."""
    from app.models import NotificationDelivery

    db.session.expire_all()
    rows = db.session.scalars(
        select(NotificationDelivery).where(NotificationDelivery.event == "connection_intent.resolved")
    )
    return [row.payload["data"] for row in rows]


@pytest.fixture
def webhook(db, card):
    from app.models.notifications import WebhookEndpoint

    endpoint = WebhookEndpoint(
        company_id=card.company.id,
        url="https://hooks.example.test/switchboard",
        events=["connection_intent.resolved"],
        secret_ciphertext="not-used-here",
    )
    db.session.add(endpoint)
    db.session.commit()
    return endpoint


def test_a_legacy_card_expires_with_its_task_and_is_not_answerable_after_a_reopen(app, db, card, webhook):
    legacy = legacy_card(db, card)
    change_task(app, card.owner, card.issue, "status", "done")
    row = fresh(db, ThreadInteraction, legacy.id)
    assert row.status == "expired" and row.kind == "connection_intent"
    assert row.result == {"version": 1, "outcome": "issue_closed", "reason": None}
    [told] = [data for data in resolved_webhooks(db, card) if data["interactionId"] == str(legacy.id)]
    assert told["outcome"] == "expired" and told["reason"] == "issue_closed" and told["service"] == "honcho"

    change_task(app, card.owner, card.issue, "status", "in_progress")
    me = Htmx(app, card.member)
    answered = me.post(f"/intents/{legacy.id}/decline")
    assert "Connection request expired" in assert_fragment(answered)
    assert fresh(db, ThreadInteraction, legacy.id).status == "expired"
    assert db.session.scalars(select(WakeupRequest)).all() == []


def test_a_legacy_card_is_superseded_when_the_responsible_person_changes(app, db, card, webhook):
    legacy = legacy_card(db, card)
    change_task(app, card.owner, card.issue, "responsible", str(card.owner.id))
    row = fresh(db, ThreadInteraction, legacy.id)
    assert row.status == "expired" and row.kind == "connection_intent"
    assert row.result == {
        "version": 1,
        "outcome": "superseded",
        "supersededByInteractionId": None,
        "reason": RESPONSIBLE_CHANGED,
    }
    assert str(legacy.id) in [data["interactionId"] for data in resolved_webhooks(db, card)]


def test_a_legacy_card_expires_when_the_task_changes_hands(app, db, make, card):
    legacy = legacy_card(db, card)
    change_task(app, card.owner, card.issue, "assignee", str(make.agent(card.company, "Other").id))
    row = fresh(db, ThreadInteraction, legacy.id)
    assert row.status == "expired"
    assert row.result == {"version": 1, "outcome": "expired", "reason": "The task assignment changed"}


def test_a_later_request_reuses_a_pending_legacy_card_and_one_for_someone_else_supersedes_it(
    app, db, make, card
):
    # The fixture's own card is answered first, so the legacy card is the one pending for Honcho.
    assert Htmx(app, card.member).post(f"{card.url}/decline").status_code == 200
    legacy = legacy_card(db, card)
    _, token = make.run(card.agent, card.issue)
    again = request_service(app.test_client(), token, "honcho")
    assert again.status_code == 200 and again.json["interactionId"] == str(legacy.id)
    assert fresh(db, ThreadInteraction, legacy.id).kind == "connection_intent"


def test_legacy_cards_become_connection_cards_at_the_upgrade_and_reach_the_inbox(app, db, card):
    import importlib

    legacy = legacy_card(db, card)
    migration = importlib.import_module("migrations.versions.0019_card_keys")
    with db.engine.begin() as conn:
        migration.adopt_legacy_cards(conn)
    row = fresh(db, ThreadInteraction, legacy.id)
    assert row.kind == "connection_intent" and row.status == "pending"
    assert row.payload["serviceSlug"] == "honcho" and row.payload["requestingAgentName"] == "Builder"
    assert row.payload["legacy"]["kind"] == "request_confirmation"
    inbox = board_api(app.test_client(), card.member, "GET", "/api/me/inbox")
    assert inbox.status_code == 200, inbox.json
    assert {"id": str(legacy.id), "service": "honcho", "kind": "connection_intent"}.items() <= next(
        item for item in inbox.json["items"] if item["id"] == str(legacy.id)
    ).items()
    page = Htmx(app, card.member).client.get("/inbox").get_data(as_text=True)
    assert f'id="inbox-item-{legacy.id}"' in page


def test_a_sign_in_that_finishes_a_draft_two_cards_wait_on_resolves_both(app, live, db, make, oauth_card):  # noqa: F811
    company, member, _, agent, issue, first = oauth_card
    other_task = make.issue(company, status="in_progress", assignee=agent, responsible=member)
    _, token = make.run(agent, other_task)
    second = request_service(app.test_client(), token, "linear").json["interactionId"]
    browser = Browser(live, member)
    connection_id = browser.create_draft(company, interactionId=first)
    assert browser.create_draft(company, interactionId=second) == connection_id
    for interaction_id in (first, second):
        assert (
            fresh(db, ThreadInteraction, interaction_id).payload["audience"]["connectionId"] == connection_id
        )
    response = browser.callback(browser.authorize(start_from_card(browser, connection_id, second)))
    assert opener_message(response)["outcome"] == "connected"
    for interaction_id in (first, second):
        row = fresh(db, ThreadInteraction, interaction_id)
        assert row.status == "accepted" and row.result["connectionId"] == connection_id
    assert installs_of(db, connection_id) == {("agent", str(agent.id))}
