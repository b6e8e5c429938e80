"""Access requests (issue 12, item 10): an agent asks for named tools of an existing connection it cannot use; the
card lists exactly those tools, "Grant access" installs the connection for that agent scoped to them (write tools
ask first), blocks stay blocks, an unnamed request reviews at most 500 indexed tools, and a named list at most 20."""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from app.models import ConnectionInstall, ConnectionTool, ThreadInteraction
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
