"""Access requests (issue 12, item 10): an agent asks for named tools of an existing connection it cannot use; the
card lists exactly those tools, "Grant access" installs the connection for that agent scoped to them (write tools
ask first), blocks stay blocks, an unnamed request reviews at most 500 indexed tools, and a named list at most 20."""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import func, select

from app.models import ConnectionInstall, ConnectionTool, Issue, ThreadInteraction, ToolConnection
from tests.doors import REQUEST_URL, bearer, rpc
from tests.services.runtime.test_runtime_rest import board_api, connect, custom_body
from tests.services.runtime.test_runtime_rest import providers as providers  # noqa: PLC0414 (the shared fixture)
from tests.web.cards.test_intent_cards import Htmx, assert_fragment


@pytest.fixture
def notes(app, db, make, providers, notes_server):
    """Acme's owner set up the notes server for another agent only; Builder works a task the owner is
    responsible for and cannot use the notes tools yet."""
    company = make.company("Acme")
    owner = make.member(company, "owner")
    builder = make.agent(company, "Builder")
    other = make.agent(company, "Other")
    connection = connect(
        app,
        owner,
        company,
        custom_body(
            notes_server.url, "Team notes", audience={"allAgents": False, "agentIds": [str(other.id)]}
        ),
    )
    issue = make.issue(company, status="in_progress", assignee=builder, responsible=owner)
    run, token = make.run(builder, issue)
    return company, owner, builder, connection, run, token


def set_policy(app, owner, connection, **actions):
    """The owner sets tool actions on the Permissions API (the connection's own policy, for every agent)."""
    response = board_api(
        app.test_client(),
        owner,
        "PATCH",
        f"/api/tool-connections/{connection['id']}",
        {"toolPolicies": actions},
    )
    assert response.status_code == 200, response.json


def ask(client, token, connection, **extra):
    body = {"service": f"connection:{connection['id']}", **extra}
    return client.post(REQUEST_URL, json=body, headers=bearer(token))


def listed_tools(client, token) -> list[str]:
    response = rpc(client, token, "tools/list")
    assert response.status_code == 200, response.get_data(as_text=True)
    return sorted(t["name"].split("__", 1)[1] for t in response.json["result"]["tools"])


def test_an_agent_asks_for_named_tools_and_gets_exactly_those(app, db, client, notes):
    company, owner, builder, connection, run, token = notes
    assert listed_tools(client, token) == []
    response = ask(client, token, connection, toolNames=["search_notes", "create_note"])
    assert response.status_code == 200, response.json
    assert response.json["state"] == "needs_user_action"
    card = db.session.get(ThreadInteraction, uuid.UUID(response.json["interactionId"]))
    assert card.title == "Grant Team notes access to Builder?"
    request = card.payload["accessRequest"]
    assert request["connectionId"] == connection["id"] and request["connectionName"] == "Team notes"
    assert [(t["toolName"], t["permission"]) for t in request["tools"]] == [
        ("search_notes", "allowed"),
        ("create_note", "ask_first"),
    ]
    assert all(t["versionHash"] for t in request["tools"])

    owner_browser = Htmx(app, owner)
    html = assert_fragment(owner_browser.get(f"/intents/{card.id}/card"))
    assert "Grant Team notes access to Builder?" in html and "Grant access" in html
    assert (
        "<code>search_notes</code>" in html and "<code>create_note</code>" in html and "get_note" not in html
    )

    granted = owner_browser.post(f"/intents/{card.id}/use/{connection['id']}")
    assert granted.status_code == 200, granted.get_data(as_text=True)
    assert "Access granted to Builder" in assert_fragment(granted)
    db.session.expire_all()
    install = db.session.scalar(
        select(ConnectionInstall).where(
            ConnectionInstall.connection_id == uuid.UUID(connection["id"]),
            ConnectionInstall.target_id == builder.id,
        )
    )
    assert install.tool_scope == {"search_notes": "allow", "create_note": "ask_first"}
    assert listed_tools(client, token) == ["create_note", "search_notes"]
    # Asked again for what it now has: ready, no second card.
    again = ask(client, token, connection, toolNames=["search_notes"])
    assert again.json["state"] == "ready" and again.json["interactionId"] is None


def test_a_write_tool_granted_by_a_card_asks_first_even_where_the_connection_allows_it(
    app, db, client, notes, notes_server
):
    company, owner, builder, connection, run, token = notes
    set_policy(app, owner, connection, create_note="allow")
    card_id = ask(client, token, connection, toolNames=["create_note"]).json["interactionId"]
    assert Htmx(app, owner).post(f"/intents/{card_id}/use/{connection['id']}").status_code == 200
    [name] = [t["name"] for t in rpc(client, token, "tools/list").json["result"]["tools"]]
    assert name.endswith("__create_note")
    call = rpc(client, token, "tools/call", {"name": name, "arguments": {"title": "t", "body": "b"}})
    assert call.status_code == 200, call.get_data(as_text=True)
    # The call is held for an approval card addressed to the responsible person instead of running.
    approvals = db.session.scalars(
        select(ThreadInteraction).where(ThreadInteraction.kind == "tool_approval")
    ).all()
    assert len(approvals) == 1 and approvals[0].addressee_user_id == owner.id
    assert notes_server.calls == []


def test_blocked_tools_stay_blocked_and_a_request_for_only_blocked_tools_is_refused(app, db, client, notes):
    company, owner, builder, connection, run, token = notes
    set_policy(app, owner, connection, create_note="block")
    refused = ask(client, token, connection, toolNames=["create_note"])
    assert refused.status_code == 403
    assert refused.json == {
        "error": "Every tool asked for is blocked on this connection. Ask an administrator to review its action "
        "permissions."
    }
    card_id = ask(client, token, connection, connectionId=connection["id"]).json["interactionId"]
    tools = db.session.get(ThreadInteraction, uuid.UUID(card_id)).payload["accessRequest"]["tools"]
    assert sorted(t["toolName"] for t in tools) == ["get_note", "search_notes"]


def test_unknown_tools_and_long_lists_are_refused(client, db, notes):
    company, owner, builder, connection, run, token = notes
    unknown = ask(client, token, connection, toolNames=["search_notes", "drop_database"])
    assert unknown.status_code == 422
    assert unknown.json == {"error": "Team notes has no tool named drop_database."}
    too_many = ask(client, token, connection, toolNames=[f"tool_{n}" for n in range(21)])
    assert too_many.status_code == 400 and too_many.json["error"] == "Validation error"
    repeated = ask(client, token, connection, toolNames=["search_notes", "search_notes"])
    assert repeated.status_code == 400
    assert db.session.scalars(select(ThreadInteraction)).all() == []


def test_an_unnamed_request_reviews_at_most_500_tools(client, db, notes):
    company, owner, builder, connection, run, token = notes
    connection_id = uuid.UUID(connection["id"])
    db.session.add_all(
        ConnectionTool(
            company_id=company.id,
            connection_id=connection_id,
            name=f"extra_{n:03d}",
            description="",
            version_hash=f"{n:064d}",
        )
        for n in range(498)  # with the three real tools: 501
    )
    db.session.commit()
    refused = ask(client, token, connection, connectionId=connection["id"])
    assert refused.status_code == 422
    assert refused.json == {
        "error": "Team notes has 501 tools, more than a person can review in one card (500). Name the tools you "
        "need (toolNames, at most 20)."
    }
    named = ask(client, token, connection, toolNames=["extra_007"])
    assert named.json["state"] == "needs_user_action"


def test_the_same_over_mcp(client, db, notes):
    company, owner, builder, connection, run, token = notes
    from tests.web.agents.test_runtime_mcp import rpc as runtime_rpc

    arguments = {"service": f"connection:{connection['id']}", "toolNames": ["get_note"]}
    answer = runtime_rpc(client, token, "tools/call", {"name": "connection_request", "arguments": arguments})
    assert answer.status_code == 200, answer.get_data(as_text=True)
    result = answer.json["result"]
    assert result["structuredContent"]["state"] == "needs_user_action"
    card = db.session.get(ThreadInteraction, uuid.UUID(result["structuredContent"]["interactionId"]))
    assert [t["toolName"] for t in card.payload["accessRequest"]["tools"]] == ["get_note"]


# --- issue 26, item 1: an access request's key names what it asks -------------------------------------------


def card_of(db, response) -> ThreadInteraction:
    assert response.status_code == 200, response.json
    assert response.json["state"] == "needs_user_action"
    db.session.expire_all()
    return db.session.get(ThreadInteraction, uuid.UUID(response.json["interactionId"]))


def asked_tools(card: ThreadInteraction) -> list[str]:
    return [t["toolName"] for t in card.payload["accessRequest"]["tools"]]


def test_requests_for_other_tools_in_one_run_each_get_their_own_card(client, db, notes):
    company, owner, builder, connection, run, token = notes
    search = card_of(db, ask(client, token, connection, toolNames=["search_notes"]))
    create = card_of(db, ask(client, token, connection, toolNames=["create_note"]))
    assert create.id != search.id
    assert asked_tools(search) == ["search_notes"] and asked_tools(create) == ["create_note"]
    assert search.status == "pending" and create.status == "pending"
    # Asked again, each request gets back the card that asks for exactly its tools.
    assert card_of(db, ask(client, token, connection, toolNames=["search_notes"])).id == search.id
    assert card_of(db, ask(client, token, connection, toolNames=["create_note"])).id == create.id


def test_a_plain_card_and_access_cards_of_one_connection_are_told_apart_across_runs(client, db, make, notes):
    company, owner, builder, connection, run, token = notes
    plain = card_of(
        db,
        client.post(REQUEST_URL, json={"service": f"connection:{connection['id']}"}, headers=bearer(token)),
    )
    assert plain.title == "Connect Team notes" and "accessRequest" not in plain.payload
    access = card_of(db, ask(client, token, connection, toolNames=["get_note"]))
    assert access.id != plain.id
    assert access.title == "Grant Team notes access to Builder?" and asked_tools(access) == ["get_note"]
    # A later run of the same agent asks for other tools: a card of its own; the earlier ones keep waiting.
    _later, later_token = make.run(builder, db.session.get(Issue, access.issue_id))
    other = card_of(db, ask(client, later_token, connection, toolNames=["search_notes"]))
    assert other.id not in (plain.id, access.id) and asked_tools(other) == ["search_notes"]
    # The same request from the later run reuses its pending card (cross-run reuse keeps the request apart).
    assert card_of(db, ask(client, later_token, connection, toolNames=["get_note"])).id == access.id
    again = client.post(
        REQUEST_URL, json={"service": f"connection:{connection['id']}"}, headers=bearer(later_token)
    )
    assert card_of(db, again).id == plain.id
    assert {c.status for c in db.session.scalars(select(ThreadInteraction))} == {"pending"}


def test_a_card_under_the_key_that_asks_for_something_else_is_refused_with_409(client, db, notes):
    """A pending card keyed as the request's key but asking for other tools (as access cards were keyed before
    keys named their request) is never handed back as the answer: `reference.md` 5.6's 409."""
    company, owner, builder, connection, run, token = notes
    from app.core.errors import Conflict
    from app.models.keys import card_key
    from app.services.intents import access_requests, creation
    from app.services.intents.service import resolve_service

    issue = db.session.get(
        Issue, card_of(db, ask(client, token, connection, toolNames=["get_note"])).issue_id
    )
    service = resolve_service(company.id, f"connection:{connection['id']}", owner.id, builder.id)
    target = db.session.get(ToolConnection, uuid.UUID(connection["id"]))
    wanted = access_requests.access_request_payload(
        target, access_requests.review_tools(target, ["search_notes"])
    )
    old = db.session.scalar(select(ThreadInteraction))
    old.idempotency_key = card_key(run.id, owner.id, service.slug, wanted)  # keyed as the new request
    db.session.commit()
    with pytest.raises(Conflict) as refused:
        creation.create_connection_intent(
            issue, builder, service, addressee_user_id=owner.id, run_id=run.id, access_request=wanted
        )
    assert refused.value.message == "Interaction idempotency key already exists for a different request"
    db.session.rollback()
    # Over HTTP the agent is told the same, and no card claims to ask for what it did not.
    answer = ask(client, token, connection, toolNames=["search_notes"])
    assert answer.status_code == 409
    assert answer.json == {"error": "Interaction idempotency key already exists for a different request"}


@pytest.mark.postgres_only
def test_concurrent_requests_for_other_tools_each_get_the_card_that_asks_for_them(app, db, notes):
    company, owner, builder, connection, run, token = notes
    wanted = {"search_notes": ["search_notes"], "create_note": ["create_note"], "get_note": ["get_note"]}
    barrier = threading.Barrier(12)
    answers: list[tuple[str, int, str | None]] = []
    lock = threading.Lock()

    def worker(name: str):
        client = app.test_client()
        barrier.wait()
        response = ask(client, token, connection, toolNames=wanted[name])
        with lock:
            answers.append((name, response.status_code, (response.json or {}).get("interactionId")))

    threads = [threading.Thread(target=worker, args=(name,)) for name in wanted for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {status for _, status, _ in answers} == {200}
    db.session.expire_all()
    for name in wanted:
        [card_id] = {card_id for asked, _, card_id in answers if asked == name}
        assert asked_tools(db.session.get(ThreadInteraction, uuid.UUID(card_id))) == [name]
    assert db.session.scalar(select(func.count()).select_from(ThreadInteraction)) == 3


def test_the_upgrade_rekeys_access_cards_stored_under_the_plain_key(client, db, notes):
    """Before keys named access requests, an access card sat under its run's plain key, where a plain request of the
    same run found it; the upgrade (0018) gives it the key of its request."""
    import importlib

    from app.models.keys import card_key

    company, owner, builder, connection, run, token = notes
    access = card_of(db, ask(client, token, connection, toolNames=["get_note"]))
    plain_key = card_key(run.id, owner.id, f"connection:{connection['id']}")
    access.idempotency_key = plain_key  # as it was stored
    db.session.commit()
    migration = importlib.import_module("migrations.versions.0019_card_keys")
    with db.engine.begin() as conn:
        assert migration.rekey_access_cards(conn) == 1
    db.session.expire_all()
    access = db.session.get(ThreadInteraction, access.id)
    assert access.idempotency_key == card_key(
        run.id, owner.id, f"connection:{connection['id']}", access.payload["accessRequest"]
    )
    plain = card_of(
        db,
        client.post(REQUEST_URL, json={"service": f"connection:{connection['id']}"}, headers=bearer(token)),
    )
    assert plain.id != access.id and plain.title == "Connect Team notes"
    assert card_of(db, ask(client, token, connection, toolNames=["get_note"])).id == access.id
