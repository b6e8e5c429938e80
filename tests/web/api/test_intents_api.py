"""Board routes that answer a connection card (setup options, phase, complete, decline), and intent expiry."""

from __future__ import annotations

import threading
import uuid
from types import SimpleNamespace

import pytest
from sqlalchemy import select

from app.extensions import db as _db
from app.models import (
    ActivityLog,
    ConnectionInstall,
    ConnectionIntentDelivery,
    GrantDelegation,
    ThreadInteraction,
    WakeupRequest,
)
from app.services.intents.expiry import expire_intents_for_issue
from tests.conftest import sign_in
from tests.doors import search
from tests.services.runtime import test_runtime_rest
from tests.services.runtime.test_runtime_rest import (
    board_api,
    connect,
    custom_body,
    honcho_body,
    request_service,
)

providers = test_runtime_rest.providers  # the shared fixture

NOT_ADDRESSEE = {"error": "Only the addressed user can act on this connection request"}


def open_honcho_card(app, db, make, url_prefix: str) -> SimpleNamespace:
    """A member is responsible for the task; the agent Builder asked for Honcho; the card is addressed to them."""
    return make.requested_card("honcho", url_prefix)


@pytest.fixture
def card(app, db, make):
    return open_honcho_card(app, db, make, "/api/connection-intents")


def as_user(app, user, method, url, body=None):
    return board_api(app.test_client(), user, method, url, body)


def personal_honcho_for_nobody(app, card):
    """The addressee's own Honcho connection, installed for no agent yet."""
    return connect(
        app, card.member, card.company, honcho_body("user", audience={"allAgents": False, "agentIds": []})
    )


def test_setup_options_show_selection_metadata_only(app, card, providers, notes_server):
    mine = personal_honcho_for_nobody(app, card)
    response = as_user(app, card.member, "GET", f"{card.url}/setup-options")
    assert response.status_code == 200
    data = response.json
    assert data["version"] == 1 and data["requestedAgentId"] == str(card.agent.id)
    assert data["interaction"]["id"] == card.id and data["interaction"]["status"] == "pending"
    assert data["service"]["service"] == "honcho" and data["service"]["state"] == "needs_user_action"
    assert data["existingConnections"] == [
        {
            "id": mine["id"],
            "name": mine["name"],
            "status": "active",
            "enabled": True,
            "providerAccountLabel": None,
        }
    ]
    body = response.get_data(as_text=True)
    for leak in ("methodConfig", "serverUrl", "credentials", "honcho-key", "127.0.0.1"):
        assert leak not in body


def test_only_the_addressee_acts_and_other_companies_see_nothing(app, make, card, providers):
    assert as_user(app, card.owner, "GET", f"{card.url}/setup-options").json == NOT_ADDRESSEE
    for path, body in (
        ("phase", {"phase": "authorizing"}),
        ("decline", {}),
        ("complete", {"connectionId": str(uuid.uuid4())}),
    ):
        response = as_user(app, card.owner, "POST", f"{card.url}/{path}", body)
        assert response.status_code == 403 and response.json == NOT_ADDRESSEE
    outsider = make.member(make.company("Other"), "owner")
    assert as_user(app, outsider, "GET", f"{card.url}/setup-options").status_code == 404
    assert as_user(app, outsider, "POST", f"{card.url}/decline", {}).status_code == 404
    missing = as_user(app, card.member, "GET", f"/api/connection-intents/{uuid.uuid4()}/setup-options")
    assert missing.status_code == 404
    anonymous = app.test_client().get(f"{card.url}/setup-options")
    assert anonymous.status_code in (302, 401)


def test_phase_moves_only_through_the_three_phases(app, db, card):
    for phase in ("authorizing", "needs_retry", "requested"):
        response = as_user(app, card.member, "POST", f"{card.url}/phase", {"phase": phase})
        assert response.status_code == 200 and response.json["payload"]["phase"] == phase
    for bad in ({"phase": "connected"}, {"phase": ""}, {}):
        response = as_user(app, card.member, "POST", f"{card.url}/phase", bad)
        assert response.status_code == 422
        assert response.json == {"error": "phase must be requested, authorizing, or needs_retry"}
    assert (
        as_user(app, card.member, "POST", f"{card.url}/phase", {"phase": "requested", "x": 1}).status_code
        == 400
    )


def test_complete_delegates_installs_resolves_and_queues_a_continuation(app, db, card, providers):
    mine = personal_honcho_for_nobody(app, card)
    runtime = app.test_client()
    assert search(runtime, card.token, "honcho").json["results"][0]["state"] == "needs_user_action"
    response = as_user(app, card.member, "POST", f"{card.url}/complete", {"connectionId": mine["id"]})
    assert response.status_code == 200, response.json
    assert response.json["status"] == "accepted"
    assert response.json["result"] == {"version": 1, "outcome": "connected", "connectionId": mine["id"]}
    db.session.expire_all()
    interaction = db.session.get(ThreadInteraction, uuid.UUID(card.id))
    assert interaction.resolved_by_user_id == card.member.id and interaction.resolved_at is not None
    (delegation,) = db.session.scalars(select(GrantDelegation)).all()
    assert delegation.agent_id == card.agent.id and delegation.created_by_user_id == card.member.id
    installs = db.session.scalars(select(ConnectionInstall)).all()
    assert [(i.target_type, i.target_id) for i in installs] == [("agent", card.agent.id)]
    # The resolution's outbox row is delivered right after commit: exactly one continuation wake.
    (delivery,) = db.session.scalars(select(ConnectionIntentDelivery)).all()
    assert delivery.interaction_id == interaction.id and delivery.delivered_at is not None
    wakes = db.session.scalars(select(WakeupRequest)).all()
    assert [w.idempotency_key for w in wakes] == [f"connection-intent:{card.id}:connected"]
    assert wakes[0].agent_id == card.agent.id
    connected = db.session.scalars(
        select(ActivityLog).where(ActivityLog.action == "issue.connection_intent_connected")
    ).all()
    assert [a.details for a in connected] == [
        {"interactionId": card.id, "connectionId": mine["id"], "requestingAgentId": str(card.agent.id)}
    ]
    # The agent can use it now.
    assert search(runtime, card.token, "honcho").json["results"][0]["state"] == "ready"
    # A double click with the same connection answers the same result; anything else is already resolved.
    again = as_user(app, card.member, "POST", f"{card.url}/complete", {"connectionId": mine["id"]})
    assert again.status_code == 200 and again.json["status"] == "accepted"
    declined = as_user(app, card.member, "POST", f"{card.url}/decline", {})
    assert declined.status_code == 409 and declined.json == {"error": "Connection intent is already resolved"}
    phase = as_user(app, card.member, "POST", f"{card.url}/phase", {"phase": "authorizing"})
    assert phase.status_code == 409
    assert len(db.session.scalars(select(ConnectionIntentDelivery)).all()) == 1


def test_complete_checks_the_connection(app, db, card, providers, notes_server):
    notes = connect(app, card.owner, card.company, custom_body(notes_server.url, "Team notes"))
    mismatch = as_user(app, card.member, "POST", f"{card.url}/complete", {"connectionId": notes["id"]})
    assert mismatch.status_code == 404 and mismatch.json == {"error": "Connection does not match this intent"}
    unknown = as_user(app, card.member, "POST", f"{card.url}/complete", {"connectionId": str(uuid.uuid4())})
    assert unknown.status_code == 404
    mine = personal_honcho_for_nobody(app, card)
    board = app.test_client()
    board_api(board, card.member, "PATCH", f"/api/tool-connections/{mine['id']}", {"enabled": False})
    disabled = as_user(app, card.member, "POST", f"{card.url}/complete", {"connectionId": mine["id"]})
    assert disabled.status_code == 409
    assert disabled.json == {"error": "Finish and test this connection before using it for the task"}
    bad = as_user(app, card.member, "POST", f"{card.url}/complete", {"connectionId": "not-a-uuid"})
    assert bad.status_code == 400 and bad.json["error"] == "Validation error"
    db.session.expire_all()
    assert db.session.get(ThreadInteraction, uuid.UUID(card.id)).status == "pending"
    assert db.session.scalars(select(ConnectionIntentDelivery)).all() == []


def test_sharing_a_company_connection_needs_manager_authority(app, db, card, providers):
    org = connect(app, card.owner, card.company, honcho_body(audience={"allAgents": False, "agentIds": []}))
    denied = as_user(app, card.member, "POST", f"{card.url}/complete", {"connectionId": org["id"]})
    assert denied.status_code == 403
    assert denied.json == {"error": "Sharing a company connection requires connection-management authority"}
    db.session.expire_all()
    assert db.session.scalars(select(ConnectionInstall)).all() == []


def test_complete_rechecks_task_ownership_and_membership(app, db, make, card, providers):
    mine = personal_honcho_for_nobody(app, card)
    other = make.agent(card.company, "Other")
    card.issue.assignee_agent_id = other.id
    db.session.commit()
    moved = as_user(app, card.member, "POST", f"{card.url}/complete", {"connectionId": mine["id"]})
    assert moved.status_code == 409
    assert moved.json == {"error": "Connection request no longer belongs to an active task"}
    card.issue.assignee_agent_id = card.agent.id
    make.membership(card.company, card.member).role = "viewer"
    db.session.commit()
    demoted = as_user(app, card.member, "POST", f"{card.url}/complete", {"connectionId": mine["id"]})
    assert demoted.status_code == 403
    assert demoted.json == {"error": "Addressed user is no longer authorized for company write access"}
    db.session.expire_all()
    assert db.session.scalars(select(GrantDelegation)).all() == []


def test_decline_records_the_trimmed_reason(app, db, card):
    too_long = as_user(app, card.member, "POST", f"{card.url}/decline", {"reason": "x" * 4001})
    assert too_long.status_code == 400
    response = as_user(
        app, card.member, "POST", f"{card.url}/decline", {"reason": "  Use the wiki instead.  "}
    )
    assert response.status_code == 200
    assert response.json["status"] == "rejected"
    assert response.json["result"] == {"version": 1, "outcome": "declined", "reason": "Use the wiki instead."}
    db.session.expire_all()
    (delivery,) = db.session.scalars(select(ConnectionIntentDelivery)).all()
    assert str(delivery.interaction_id) == card.id
    (activity,) = db.session.scalars(
        select(ActivityLog).where(ActivityLog.action == "issue.connection_intent_declined")
    ).all()
    assert activity.details == {"interactionId": card.id, "reason": "Use the wiki instead."}
    assert as_user(app, card.member, "POST", f"{card.url}/decline", {}).status_code == 409


def test_blank_reason_is_null(app, card):
    response = as_user(app, card.member, "POST", f"{card.url}/decline", {"reason": "   "})
    assert response.json["result"]["reason"] is None


def test_closing_or_reassigning_the_task_expires_pending_cards(app, db, make, card):
    other = make.agent(card.company, "Other")
    card.issue.assignee_agent_id = other.id
    assert expire_intents_for_issue(card.issue) == 1
    db.session.commit()
    interaction = db.session.get(ThreadInteraction, uuid.UUID(card.id))
    assert interaction.status == "expired"
    assert interaction.result == {"version": 1, "outcome": "expired", "reason": "The task assignment changed"}

    card.issue.assignee_agent_id = card.agent.id
    db.session.commit()
    _run, token = make.run(card.agent, card.issue)
    fresh = request_service(app.test_client(), token, "notion").json["interactionId"]
    # Unrelated updates keep the pending card.
    assert expire_intents_for_issue(card.issue) == 0
    card.issue.status = "done"
    assert expire_intents_for_issue(card.issue) == 1
    db.session.commit()
    closed = db.session.get(ThreadInteraction, uuid.UUID(fresh))
    assert closed.status == "expired"
    assert closed.result == {"version": 1, "outcome": "issue_closed", "reason": None}


@pytest.mark.postgres_only
def test_complete_and_decline_race_resolves_once(app, db, card, providers):
    mine = personal_honcho_for_nobody(app, card)
    barrier = threading.Barrier(2)
    statuses: dict[str, int] = {}

    signed_in = {}
    for path in ("complete", "decline"):
        client = app.test_client()
        signed_in[path] = (client, sign_in(client, card.member))

    def act(path, body):
        client, token = signed_in[path]
        barrier.wait()
        statuses[path] = client.post(
            f"{card.url}/{path}", json=body, headers={"X-CSRFToken": token}
        ).status_code

    threads = [
        threading.Thread(target=act, args=("complete", {"connectionId": mine["id"]})),
        threading.Thread(target=act, args=("decline", {})),
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(statuses.values()) == [200, 409]
    _db.session.expire_all()
    interaction = _db.session.get(ThreadInteraction, uuid.UUID(card.id))
    assert interaction.status == ("accepted" if statuses["complete"] == 200 else "rejected")
    assert len(_db.session.scalars(select(ConnectionIntentDelivery)).all()) == 1
