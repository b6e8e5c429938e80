"""A personal identity belongs to its person: a member's personal grant delegated to an agent (by answering the
agent's card) serves that agent only on runs the member is responsible for.

Everything goes through the doors: the member connects Honcho and answers the card over the board API; the agent's
runs ask over the runtime REST door and list tools over the gateway; the instruction snapshot is what a run's
invocation is handed.
"""

from __future__ import annotations

import pytest

from app.models import HeartbeatRun
from app.services.runs.snapshot import resolve_instructions_for_run
from tests.doors import request_service, rpc, search
from tests.services.runtime import test_runtime_rest
from tests.web.api.test_intents_api import as_user, open_honcho_card, personal_honcho_for_nobody

providers = test_runtime_rest.providers  # the shared fixture

HONCHO_TOOLS = {"honcho__search_memory", "honcho__save_memory"}


@pytest.fixture
def delegated(app, db, make, providers):
    """The member answered Builder's card on the member's task with their own Honcho (grant delegated to Builder);
    the owner is responsible for another task Builder works on."""
    card = open_honcho_card(app, db, make, "/api/connection-intents")
    mine = personal_honcho_for_nobody(app, card)
    done = as_user(app, card.member, "POST", f"{card.url}/complete", {"connectionId": mine["id"]})
    assert done.status_code == 200, done.json
    owners_task = make.issue(card.company, status="in_progress", assignee=card.agent, responsible=card.owner)
    owners_run, owners_token = make.run(card.agent, owners_task)
    members_run, members_token = make.run(card.agent, card.issue)
    card.connection_id = mine["id"]
    card.owners = (owners_run, owners_token)
    card.members = (members_run, members_token)
    return card


def listed_tools(client, token) -> set[str]:
    response = rpc(client, token, "tools/list")
    assert response.status_code == 200, response.get_data(as_text=True)
    return {tool["name"] for tool in response.json["result"]["tools"]}


def honcho_result(client, token) -> dict:
    return next(r for r in search(client, token, "honcho").json["results"] if r["service"] == "honcho")


def test_the_members_personal_grant_is_refused_on_the_owners_run(app, db, delegated):
    client = app.test_client()
    run, token = delegated.owners
    state = honcho_result(client, token)
    assert state["state"] == "needs_user_action" and state["connectionId"] is None
    assert state["reason"] == "Review identity and access for this agent"
    asked = request_service(client, token, "honcho")
    assert asked.status_code == 200
    assert asked.json["state"] == "needs_user_action" and asked.json["connectionId"] is None
    assert asked.json["interactionId"] is not None  # a card for the owner, who may connect their own identity
    assert listed_tools(client, token).isdisjoint(HONCHO_TOOLS)
    assert resolve_instructions_for_run(db.session.get(HeartbeatRun, run.id)) is None


def test_the_members_personal_grant_serves_the_members_run(app, db, delegated):
    client = app.test_client()
    run, token = delegated.members
    state = honcho_result(client, token)
    assert state["state"] == "ready" and state["connectionId"] == delegated.connection_id
    asked = request_service(client, token, "honcho").json
    assert asked["state"] == "ready" and asked["connectionId"] == delegated.connection_id
    assert listed_tools(client, token) >= HONCHO_TOOLS
    snapshot = resolve_instructions_for_run(db.session.get(HeartbeatRun, run.id))
    assert snapshot is not None and f'"connectionId":"{delegated.connection_id}"' in snapshot["text"]
