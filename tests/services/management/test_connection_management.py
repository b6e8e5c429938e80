"""Connection management at the doors: disable / enable, disconnect, delete (pages and JSON), draft cleanup and the
trust signals on the Permissions page. Connections are made through the board API against the real MCP provider
peers; agents see the effect through the gateway and runtime search with a real run token."""

from __future__ import annotations

import re
import uuid

import pytest
from sqlalchemy import select

from app.models import (
    AccessRevision,
    ActivityLog,
    ConnectionGrant,
    ConnectionInstall,
    GrantSecret,
    ThreadInteraction,
    ToolConnection,
    ToolPolicy,
)
from app.services.runs.snapshot import resolve_instructions_for_run
from tests.conftest import sign_in
from tests.doors import REQUEST_URL, bearer, search
from tests.peers.mcp_servers import HONCHO_KEY

GATEWAY = "/mcp/gateway"
CONFIGURE_FORBIDDEN = (
    "Only the connection creator or a connection manager can configure, reconnect, or delete this connection"
)


@pytest.fixture
def world(make, client, providers):
    """Acme: an owner (responsible for the task), an agent running on it, a board client signed in as owner."""
    return make.task_run(client=client)


def api(world, method, url, body=None):
    return world.client.open(url, method=method, json=body, headers={"X-CSRFToken": world.csrf})


def post_form(world, url, **data):
    return world.client.post(url, data={"csrf_token": world.csrf, **data})


def connect_honcho(world, key=HONCHO_KEY, **extra):
    body = {
        "appSlug": "honcho",
        "identity": "organization",
        "credentials": {"authorization": key},
        "methodConfig": {"workspaceId": "team-workspace"},
        **extra,
    }
    return api(world, "POST", f"/api/companies/{world.company.id}/tools/apps/connect", body)


def gateway_tools(world) -> set[str]:
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    response = world.client.post(GATEWAY, json=message, headers=bearer(world.token))
    assert response.status_code == 200, response.get_data(as_text=True)
    return {t["name"] for t in response.json["result"]["tools"]}


def honcho_state(world) -> str:
    results = search(world.client, world.token, "honcho").json["results"]
    return next(r for r in results if r["service"] == "honcho")["state"]


def revision(db, company) -> int:
    db.session.expire_all()
    row = db.session.get(AccessRevision, company.id)
    return row.revision if row else 0


def actions(db) -> list[str]:
    db.session.expire_all()
    return [r.action for r in db.session.scalars(select(ActivityLog).order_by(ActivityLog.created_at))]


def fresh(db, model, key):
    db.session.expire_all()
    return db.session.get(model, uuid.UUID(str(key)))


# --- disable / enable ---------------------------------------------------------------------------------------------


def test_disable_takes_tools_search_and_instructions_away_at_once_and_enable_brings_them_back(db, world):
    cid = connect_honcho(world).json["id"]
    assert any(name.endswith("search_memory") for name in gateway_tools(world))
    assert honcho_state(world) == "ready"
    assert resolve_instructions_for_run(world.run) is not None
    before = revision(db, world.company)

    response = post_form(world, f"/apps/{cid}/disable", back="connections")
    assert response.status_code == 303 and response.headers["Location"].endswith("/connections")
    assert revision(db, world.company) > before
    assert fresh(db, ToolConnection, cid).enabled is False
    assert gateway_tools(world) == set()
    assert honcho_state(world) != "ready"
    assert resolve_instructions_for_run(world.run) is None
    page = world.client.get(f"/apps/{cid}/permissions").get_data(as_text=True)
    assert "Disabled: agents do not see its tools" in page and f'action="/apps/{cid}/enable"' in page

    response = post_form(world, f"/apps/{cid}/enable", back="permissions")
    assert response.status_code == 303 and response.headers["Location"].endswith(f"/apps/{cid}/permissions")
    assert any(name.endswith("search_memory") for name in gateway_tools(world))
    assert honcho_state(world) == "ready"
    assert resolve_instructions_for_run(world.run) is not None
    # (The agent's listings in between are on the activity log too: its run's decision timeline, issue 28.)
    changes = [action for action in actions(db) if action.startswith("tool_connection.")]
    assert changes[-2:] == ["tool_connection.disabled", "tool_connection.enabled"]


def test_the_connections_list_offers_the_controls_to_those_who_may_configure(db, world, make):
    cid = connect_honcho(world).json["id"]
    page = world.client.get("/connections").get_data(as_text=True)
    for action in ("disable", "disconnect", "delete"):
        assert f'href="/apps/{cid}/{action}"' in page or f'action="/apps/{cid}/{action}"' in page
    viewer = make.member(world.company, "viewer")
    world.client.post("/logout", data={"csrf_token": world.csrf})
    world.csrf = sign_in(world.client, viewer)
    page = world.client.get("/connections").get_data(as_text=True)
    assert f"/apps/{cid}/disable" not in page and f"/apps/{cid}/delete" not in page


@pytest.mark.parametrize("role", ["viewer", "member"])
@pytest.mark.parametrize(
    "method,path",
    [
        ("POST", "/apps/{cid}/disable"),
        ("POST", "/apps/{cid}/disconnect"),
        ("GET", "/apps/{cid}/delete"),
        ("POST", "/apps/{cid}/delete"),
        ("DELETE", "/api/tool-connections/{cid}"),
        ("POST", "/api/tool-connections/{cid}/disconnect"),
    ],
)
def test_only_the_creator_or_a_manager_may_manage(db, world, make, role, method, path):
    cid = connect_honcho(world).json["id"]
    other = make.member(world.company, role)
    world.client.post("/logout", data={"csrf_token": world.csrf})
    world.csrf = sign_in(world.client, other)
    url = path.format(cid=cid)
    if url.startswith("/api/"):
        response = api(world, method, url)
        assert response.status_code == 403 and response.json == {"error": CONFIGURE_FORBIDDEN}
    else:
        response = world.client.open(url, method=method, data={"csrf_token": world.csrf})
        assert response.status_code == 403
    connection = fresh(db, ToolConnection, cid)
    assert connection.status == "active" and connection.enabled is True


def test_another_companys_connection_is_not_found(db, world, make):
    cid = connect_honcho(world).json["id"]
    elsewhere = make.company("Elsewhere")
    stranger = make.member(elsewhere, "owner")
    world.client.post("/logout", data={"csrf_token": world.csrf})
    world.csrf = sign_in(world.client, stranger)
    assert api(world, "DELETE", f"/api/tool-connections/{cid}").status_code == 404
    assert post_form(world, f"/apps/{cid}/disable").status_code == 404
    assert world.client.get(f"/apps/{cid}/delete").status_code == 404
    assert fresh(db, ToolConnection, cid) is not None


# --- disconnect ---------------------------------------------------------------------------------------------------


def test_disconnect_erases_credentials_keeps_settings_and_reconnect_keeps_the_id(db, world):
    cid = connect_honcho(world).json["id"]
    policies = api(
        world, "PATCH", f"/api/tool-connections/{cid}", {"toolPolicies": {"search_memory": "block"}}
    )
    assert policies.status_code == 200
    confirm = world.client.get(f"/apps/{cid}/disconnect").get_data(as_text=True)
    assert "Disconnect Honcho?" in confirm and "Builder" in confirm
    before = revision(db, world.company)

    response = post_form(world, f"/apps/{cid}/disconnect", back="permissions")
    assert response.status_code == 303
    assert revision(db, world.company) > before
    connection = fresh(db, ToolConnection, cid)
    assert connection.status == "disconnected"
    assert db.session.scalars(select(GrantSecret)).all() == []
    grants = db.session.scalars(select(ConnectionGrant)).all()
    assert grants and all(g.status == "revoked" and g.revoked_at is not None for g in grants)
    assert db.session.scalars(select(ConnectionInstall)).all()  # the audience is kept
    assert gateway_tools(world) == set()
    assert honcho_state(world) != "ready"
    page = world.client.get(f"/apps/{cid}/permissions").get_data(as_text=True)
    assert "Disconnected" in page and f'href="/apps/{cid}/reconnect"' in page
    assert "tool_connection.disconnected" in actions(db)
    assert api(world, "POST", f"/api/tool-connections/{cid}/disconnect").status_code == 409

    finish = api(
        world,
        "POST",
        f"/api/companies/{world.company.id}/tools/apps/{cid}/finish",
        {"credentials": {"authorization": HONCHO_KEY}},
    )
    assert finish.status_code == 200, finish.json
    assert finish.json["id"] == cid and finish.json["status"] == "active" and finish.json["enabled"] is True
    assert finish.json["audience"] == {"allAgents": True, "agentIds": []}
    assert {t["name"]: t["action"] for t in finish.json["tools"]}["search_memory"] == "block"
    assert "tool_connection.reconnected" in actions(db)
    assert any(name.endswith("list_workspaces") for name in gateway_tools(world))


def test_disconnect_keeps_pending_cards_for_the_service_waiting(db, world):
    cid = connect_honcho(world).json["id"]
    post_form(world, f"/apps/{cid}/disconnect")
    response = world.client.post(REQUEST_URL, json={"service": "honcho"}, headers=bearer(world.token))
    assert response.status_code == 200, response.json
    card = fresh(db, ThreadInteraction, response.json["interactionId"])
    assert card.status == "pending"
    options = api(world, "GET", f"/api/connection-intents/{card.id}/setup-options").json
    # Not offered as usable while disconnected; after a reconnect it is.
    assert cid not in {c["id"] for c in options["existingConnections"]}
    finish = api(
        world,
        "POST",
        f"/api/companies/{world.company.id}/tools/apps/{cid}/finish",
        {"credentials": {"authorization": HONCHO_KEY}},
    )
    assert finish.status_code == 200
    options = api(world, "GET", f"/api/connection-intents/{card.id}/setup-options").json
    assert [c["id"] for c in options["existingConnections"]] == [cid]
    assert fresh(db, ThreadInteraction, card.id).status == "pending"


# --- delete -------------------------------------------------------------------------------------------------------


def _approval_card(db, world, cid, status="pending") -> ThreadInteraction:
    card = ThreadInteraction(
        company_id=world.company.id,
        issue_id=world.issue.id,
        kind="tool_approval",
        status=status,
        title="Approve save_memory on Honcho?",
        summary="Builder wants to call save_memory on Honcho.",
        payload={"version": 1, "connectionId": cid, "toolName": "save_memory"},
        idempotency_key=f"tool-approval:{uuid.uuid4().hex}",
        addressee_user_id=world.owner.id,
        requesting_agent_id=world.agent.id,
        source_run_id=world.run.id,
    )
    db.session.add(card)
    db.session.commit()
    return card


def test_delete_json_is_204_and_removes_everything_under_the_connection(db, world):
    cid = connect_honcho(world).json["id"]
    before = revision(db, world.company)
    response = api(world, "DELETE", f"/api/tool-connections/{cid}")
    assert response.status_code == 204 and response.get_data() == b""
    assert revision(db, world.company) > before
    assert fresh(db, ToolConnection, cid) is None
    for model in (ConnectionGrant, GrantSecret, ConnectionInstall, ToolPolicy):
        assert db.session.scalars(select(model)).all() == []
    assert gateway_tools(world) == set()
    assert honcho_state(world) == "available"
    deleted = db.session.scalar(select(ActivityLog).where(ActivityLog.action == "tool_connection.deleted"))
    assert deleted.entity_id == cid and deleted.details["allAgents"] is True
    assert HONCHO_KEY not in str(deleted.details)
    assert api(world, "DELETE", f"/api/tool-connections/{cid}").status_code == 404


def test_delete_is_409_while_a_tool_approval_waits_for_an_answer(db, world):
    cid = connect_honcho(world).json["id"]
    card = _approval_card(db, world, cid)
    response = api(world, "DELETE", f"/api/tool-connections/{cid}")
    assert response.status_code == 409
    assert response.json["error"].startswith("1 tool approval request for this connection still wait")
    page = world.client.get(f"/apps/{cid}/delete").get_data(as_text=True)
    assert "Approve save_memory on Honcho?" in page and "disabled" in page
    assert post_form(world, f"/apps/{cid}/delete").status_code == 409
    assert fresh(db, ToolConnection, cid) is not None
    card = fresh(db, ThreadInteraction, card.id)
    card.status = "denied"
    db.session.commit()
    assert api(world, "DELETE", f"/api/tool-connections/{cid}").status_code == 204


def test_the_delete_page_lists_agents_and_cards_and_deleting_returns_to_the_list(db, world, make):
    make.agent(world.company, "Writer")
    cid = connect_honcho(world).json["id"]
    page = world.client.get(f"/apps/{cid}/delete").get_data(as_text=True)
    assert "Delete Honcho?" in page and "Agents that lose access" in page
    assert "Builder" in page and "Writer" in page
    response = post_form(world, f"/apps/{cid}/delete")
    assert response.status_code == 303 and response.headers["Location"].endswith("/connections")
    listing = world.client.get("/connections").get_data(as_text=True)
    assert "Honcho is deleted." in listing and f"/apps/{cid}/permissions" not in listing


def test_deleting_a_cards_draft_keeps_the_card_waiting_without_its_saved_setup(db, world):
    response = world.client.post(REQUEST_URL, json={"service": "honcho"}, headers=bearer(world.token))
    interaction_id = response.json["interactionId"]
    draft = connect_honcho(world, credentials={}, interactionId=interaction_id)
    assert draft.status_code == 201, draft.json
    card = fresh(db, ThreadInteraction, interaction_id)
    assert card.payload["audience"]["connectionId"] == draft.json["id"]
    page = world.client.get(f"/apps/{draft.json['id']}/delete").get_data(as_text=True)
    assert "keeps waiting" in page

    assert api(world, "DELETE", f"/api/tool-connections/{draft.json['id']}").status_code == 204
    card = fresh(db, ThreadInteraction, interaction_id)
    assert card.status == "pending" and "audience" not in card.payload
    options = api(world, "GET", f"/api/connection-intents/{interaction_id}/setup-options")
    assert options.status_code == 200, options.json
    # The card can be answered with a new setup.
    again = connect_honcho(world, interactionId=interaction_id)
    assert again.status_code == 201, again.json
    assert fresh(db, ThreadInteraction, interaction_id).status == "accepted"


# --- drafts -------------------------------------------------------------------------------------------------------


def test_failed_setups_stay_one_draft_per_app_and_person_and_are_logged_as_failures(db, world, make):
    first = connect_honcho(world, key="wrong-key-1")
    second = connect_honcho(world, key="wrong-key-2")
    assert first.status_code == second.status_code == 422
    assert first.json["connectionId"] == second.json["connectionId"]
    drafts = db.session.scalars(select(ToolConnection)).all()
    assert [(d.name, d.status) for d in drafts] == [("Honcho", "draft")]
    logged = actions(db)
    assert logged.count("tool_app.setup_failed") == 2 and "tool_app.connected" not in logged
    failure = db.session.scalar(select(ActivityLog).where(ActivityLog.action == "tool_app.setup_failed"))
    assert "wrong-key" not in str(failure.details)

    # The page form resumes the same draft too.
    page = post_form(
        world,
        "/apps/honcho/connect",
        method_key="api-key",
        identity="organization",
        **{"credentials-authorization": "wrong-key-3", "config-workspaceId": "team-workspace"},
    )
    assert page.status_code == 422
    assert len(db.session.scalars(select(ToolConnection)).all()) == 1

    listing = world.client.get("/connections").get_data(as_text=True)
    draft_id = first.json["connectionId"]
    assert "Draft" in listing
    assert f'href="/apps/{draft_id}/reconnect"' in listing and f'href="/apps/{draft_id}/delete"' in listing

    # Someone else's setup of the same app is their own draft.
    colleague = make.member(world.company, "member")
    world.client.post("/logout", data={"csrf_token": world.csrf})
    world.csrf = sign_in(world.client, colleague)
    theirs = connect_honcho(world, key="wrong-key-4", identity="user")
    assert theirs.status_code == 422 and theirs.json["connectionId"] != draft_id

    # Deleting a draft (Delete on the list) removes it.
    world.client.post("/logout", data={"csrf_token": world.csrf})
    world.csrf = sign_in(world.client, world.owner)
    assert post_form(world, f"/apps/{draft_id}/delete").status_code == 303
    assert fresh(db, ToolConnection, draft_id) is None
    ok = connect_honcho(world)
    assert ok.status_code == 201 and ok.json["name"] == "Honcho"
    assert actions(db).count("tool_app.connected") == 1


# --- trust signals ------------------------------------------------------------------------------------------------


def test_permissions_page_shows_the_indexed_tools_and_before_connecting_what_the_method_asks(db, world):
    draft = connect_honcho(world, key="wrong-key")
    page = world.client.get(f"/apps/{draft.json['connectionId']}/permissions").get_data(as_text=True)
    assert "Before you connect" in page and "What Honcho setup asks for" in page
    assert "Which tools agents will see" in page and "All agents" in page
    connect_page = world.client.get("/apps/honcho/connect").get_data(as_text=True)
    assert "What this asks for:" in connect_page and "What agents will see:" in connect_page

    cid = connect_honcho(world).json["id"]
    page = world.client.get(f"/apps/{cid}/permissions").get_data(as_text=True)
    tools = db.session.scalars(select(ToolPolicy)).all()
    indexed = re.search(r'data-testid="tools-indexed">(.*?)</dd>', page, re.S).group(1)
    assert f"{len(tools)} tools:" in indexed and "read," in indexed and "write." in indexed
    assert "<code>search_memory</code>" in indexed and "<code>save_memory</code>" in indexed
    assert "Honcho accepted the API key" in page


def test_the_openapi_document_describes_delete(client):
    document = client.get("/api/openapi.json").json
    operation = document["paths"]["/api/tool-connections/{connection_id}"]["delete"]
    assert {"204", "403", "404", "409"} <= set(operation["responses"])
    assert "revocation" in operation["description"]


# --- issue 26, item 2: deleting a connection an access card names --------------------------------------------------


def test_deleting_a_connection_an_access_card_names_expires_the_card_and_wakes_its_agent_once(
    db, world, make
):
    from app.models import HeartbeatRun, WakeupRequest
    from app.services.runs.invocation import prepare_invocation
    from app.workers.continuations import sweep_pending

    other = make.agent(world.company, "Writer")
    cid = connect_honcho(world, audience={"allAgents": False, "agentIds": [str(other.id)]}).json["id"]
    asked = world.client.post(
        REQUEST_URL,
        json={"service": "honcho", "connectionId": cid, "toolNames": ["search_memory"]},
        headers=bearer(world.token),
    )
    assert asked.status_code == 200 and asked.json["state"] == "needs_user_action", asked.json
    interaction_id = asked.json["interactionId"]
    card = fresh(db, ThreadInteraction, interaction_id)
    assert card.title == "Grant Honcho access to Builder?"

    page = world.client.get(f"/apps/{cid}/delete").get_data(as_text=True)
    assert "No pending requests name this connection" not in page
    assert (
        f'<a href="/tasks/{world.issue.id}">Grant Honcho access to Builder?</a>: expires (nothing else can answer it).'
        in page
    )

    response = post_form(world, f"/apps/{cid}/delete")
    assert response.status_code == 303, response.get_data(as_text=True)
    card = fresh(db, ThreadInteraction, interaction_id)
    assert card.status == "expired"
    assert card.result == {"version": 1, "outcome": "expired", "reason": "The connection was deleted"}
    # Grant access is no longer offered: the card says what became of it.
    thread = world.client.get(f"/tasks/{world.issue.id}").get_data(as_text=True)
    assert "Grant access" not in thread and "Connection request expired" in thread

    # One wake, whose prompt tells the agent why the card it waits on will not be answered.
    world.run.status = "succeeded"  # the run that asked ended, waiting for its continuation
    db.session.commit()
    assert sweep_pending() == {"woken": 1}
    assert sweep_pending() == {}
    [wake] = db.session.scalars(
        select(WakeupRequest).where(WakeupRequest.idempotency_key.like("connection-intent:%"))
    )
    assert wake.idempotency_key == f"connection-intent:{interaction_id}:expired"
    run = db.session.get(HeartbeatRun, wake.run_id)
    assert run.context_snapshot["outcome"] == "expired"
    run.status = "running"
    db.session.commit()
    prompt = prepare_invocation(run).prompt
    assert (
        f"The connection request for Honcho ({interaction_id}) can no longer be answered: The connection was "
        "deleted. Do not wait for it; if you still need Honcho, look for it again with connections_search. "
        "This is a fresh session."
    ) in prompt


@pytest.mark.postgres_only
def test_a_delete_racing_grant_access_leaves_the_card_ended_one_way(app, db, world, make):
    """Grant access and the delete of the connection it names, at once: the card ends exactly one way (access
    granted before the delete, or expired by it with one continuation), and neither side answers with a 500."""
    import threading

    from app.models import ConnectionIntentDelivery

    other = make.agent(world.company, "Writer")
    cid = connect_honcho(world, audience={"allAgents": False, "agentIds": [str(other.id)]}).json["id"]
    asked = world.client.post(
        REQUEST_URL,
        json={"service": "honcho", "connectionId": cid, "toolNames": ["search_memory"]},
        headers=bearer(world.token),
    )
    interaction_id = asked.json["interactionId"]
    barrier = threading.Barrier(2)
    statuses: dict[str, int] = {}

    clients = {name: app.test_client() for name in ("grant", "delete")}
    csrf = {name: sign_in(client, world.owner) for name, client in clients.items()}

    def grant():
        barrier.wait()
        response = clients["grant"].post(
            f"/intents/{interaction_id}/use/{cid}", data={"csrf_token": csrf["grant"]}
        )
        statuses["grant"] = response.status_code

    def delete():
        barrier.wait()
        response = clients["delete"].post(f"/apps/{cid}/delete", data={"csrf_token": csrf["delete"]})
        statuses["delete"] = response.status_code

    threads = [threading.Thread(target=grant), threading.Thread(target=delete)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert statuses["delete"] == 303 and statuses["grant"] in (200, 303, 409, 422), statuses
    card = fresh(db, ThreadInteraction, interaction_id)
    delivery = db.session.get(ConnectionIntentDelivery, card.id)
    assert delivery is not None  # one continuation either way
    if card.status == "expired":
        assert card.result == {"version": 1, "outcome": "expired", "reason": "The connection was deleted"}
    else:
        assert card.status == "accepted" and card.result["connectionId"] == cid
    assert fresh(db, ToolConnection, cid) is None
