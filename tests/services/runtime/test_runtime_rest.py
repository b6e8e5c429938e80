"""The runtime REST routes: connections search and connection request, with connections made through the board API
against real MCP provider peers on loopback."""

from __future__ import annotations

import threading
import uuid

import pytest
from sqlalchemy import func, select

from app.extensions import db as _db
from app.models import ActivityLog, HeartbeatRun, ThreadInteraction
from app.services.runs.tokens import mint_run_token
from app.services.runtime.search import clear_search_indexes
from tests.conftest import count_statements, sign_in
from tests.doors import REQUEST_URL, bearer, request_service, search
from tests.peers.mcp_servers import HONCHO_KEY, NOTES_KEY

NOT_AVAILABLE = "Connection service {} is not available"


@pytest.fixture
def providers(app, notes_server, honcho_server, monkeypatch):
    # Custom servers on loopback are refused unless the operator allow-lists the host.
    monkeypatch.setitem(app.config, "OUTBOUND_ALLOWED_HOSTS", ["127.0.0.1"])
    saved = app.config.get("PROVIDER_SERVER_URLS")
    app.config["PROVIDER_SERVER_URLS"] = {"github": notes_server.url, "honcho": honcho_server.url}
    yield
    app.config["PROVIDER_SERVER_URLS"] = saved


def board_api(client, user, method, url, body=None):
    token = sign_in(client, user)
    return client.open(url, method=method, json=body, headers={"X-CSRFToken": token})


def connect(app, user, company, body):
    board = app.test_client()
    response = board_api(board, user, "POST", f"/api/companies/{company.id}/tools/apps/connect", body)
    assert response.status_code == 201, response.json
    return response.json


def honcho_body(identity="organization", **extra):
    return {
        "appSlug": "honcho",
        "identity": identity,
        "credentials": {"authorization": HONCHO_KEY},
        "methodConfig": {"workspaceId": "team"},
        **extra,
    }


def custom_body(url, name, identity="organization", **extra):
    return {
        "appSlug": "custom",
        "methodKey": "custom-api-key",
        "identity": identity,
        "name": name,
        "credentials": {"authorization": NOTES_KEY},
        "methodConfig": {"serverUrl": url},
        **extra,
    }


# --- search -------------------------------------------------------------------------------------------------


def test_empty_search_lists_catalog_apps_without_run_identity(client, world):
    response = search(client, world.token)
    assert response.status_code == 200
    data = response.json
    assert data["version"] == 1 and data["query"] == ""
    services = [r["service"] for r in data["results"]]
    assert "github" in services and "notion" in services and "custom" not in services
    assert len(services) <= 20
    names = [r["name"].casefold() for r in data["results"]]
    assert names == sorted(names)
    github = next(r for r in data["results"] if r["service"] == "github")
    assert set(github) == {
        "service",
        "name",
        "description",
        "logoUrl",
        "methods",
        "source",
        "state",
        "reason",
        "connectionId",
    }
    assert github["state"] == "available" and github["connectionId"] is None
    assert github["reason"] == "Connect this service to continue"
    assert github["logoUrl"].startswith("/static/img/apps/")
    assert {m["auth"] for m in github["methods"]} <= {"oauth", "api_key", "none"}
    body = response.get_data(as_text=True)
    for secret in (str(world.run.id), str(world.agent.id), str(world.owner.id), world.token):
        assert secret not in body


def test_search_ranks_exact_matches_first_then_matched_tokens(client, world):
    exact = search(client, world.token, "  GitHub ").json
    assert exact["query"] == "GitHub"
    assert exact["results"][0]["service"] == "github"
    memory = search(client, world.token, "memory").json["results"]
    assert memory and all(r["state"] == "available" for r in memory)
    assert [r["name"].casefold() for r in memory] == sorted(r["name"].casefold() for r in memory)
    two = search(client, world.token, "notion pages").json["results"]
    assert two[0]["service"] == "notion"
    assert search(client, world.token, "zzqqxx").json["results"] == []


def test_search_body_is_validated(client, world):
    long = search(client, world.token, "x" * 201)
    assert long.status_code == 400 and long.json["error"] == "Validation error"
    assert search(client, world.token, "x" * 200).status_code == 200
    extra = search(client, world.token, "github", runId="spoof")
    assert extra.status_code == 400 and extra.json["details"][0]["loc"] == ["runId"]
    not_object = client.post(
        "/runtime-tools/connections/search", json=["github"], headers=bearer(world.token)
    )
    assert not_object.status_code == 400


def test_ready_connection_is_reported_without_contacting_providers(
    app, client, world, providers, honcho_server
):
    created = connect(app, world.owner, world.company, honcho_body())
    before = len(honcho_server.requests)
    result = search(client, world.token, "honcho").json["results"][0]
    assert result["service"] == "honcho" and result["state"] == "ready"
    assert result["connectionId"] == created["id"]
    assert result["reason"] == "Connection is installed and usable by this agent"
    assert len(honcho_server.requests) == before
    ready = request_service(client, world.token, "honcho")
    assert ready.status_code == 200
    assert ready.json == {
        "version": 1,
        "service": "honcho",
        "state": "ready",
        "connectionId": created["id"],
        "interactionId": None,
        "instruction": "Honcho is connected and available in this run. Use its installed tools.",
    }


def test_someone_elses_personal_connection_needs_user_action(app, client, make, world, providers):
    other = make.member(world.company, "member")
    connect(app, other, world.company, honcho_body("user"))
    result = search(client, world.token, "honcho").json["results"][0]
    assert result["state"] == "needs_user_action"
    assert result["reason"] == "Review identity and access for this agent"


def test_blocked_tools_are_an_administrative_denial(app, client, world, providers):
    created = connect(app, world.owner, world.company, honcho_body())
    board = app.test_client()
    policies = {t["name"]: "block" for t in created["tools"]}
    patched = board_api(
        board, world.owner, "PATCH", f"/api/tool-connections/{created['id']}", {"toolPolicies": policies}
    )
    assert patched.status_code == 200
    result = search(client, world.token, "honcho").json["results"][0]
    assert result["state"] == "unavailable" and "administrator" in result["reason"]
    denied = request_service(client, world.token, "honcho")
    assert denied.status_code == 403
    assert denied.json["error"].startswith("This agent has no permitted actions for this service.")


def test_custom_connections_and_tool_text_only_within_the_identity_audience(
    app, client, make, world, providers, notes_server
):
    other = make.member(world.company, "member")
    private = connect(app, other, world.company, custom_body(notes_server.url, "Private notes", "user"))
    # The other person's personal custom server is invisible, including its indexed tool descriptions.
    assert search(client, world.token, "checklist titles").json["results"] == []
    assert all(
        r["service"] != f"connection:{private['id']}" for r in search(client, world.token).json["results"]
    )
    denied = request_service(client, world.token, f"connection:{private['id']}")
    assert denied.status_code == 422
    assert denied.json == {"error": NOT_AVAILABLE.format(f"connection:{private['id']}")}

    shared = connect(app, world.owner, world.company, custom_body(notes_server.url, "Team notes"))
    found = search(client, world.token, "matching titles").json["results"]
    assert [r["service"] for r in found] == [f"connection:{shared['id']}"]
    assert found[0]["name"] == "Team notes" and found[0]["source"] == "configured"
    assert found[0]["methods"] == [
        {"key": "configured", "label": "Use configured connection", "auth": "api_key"}
    ]
    assert found[0]["state"] == "ready"
    assert notes_server.url not in search(client, world.token).get_data(as_text=True)


def github_body(identity="organization"):
    return {
        "appSlug": "github",
        "methodKey": "mcp-key",
        "identity": identity,
        "credentials": {"authorization": NOTES_KEY},
    }


def test_catalog_apps_rank_on_their_indexed_tool_words_only_within_the_identity_audience(
    app, client, make, world, providers
):
    # "checklist" and "titles" are in no catalog definition; the notes peer's search tool mentions "titles".
    assert search(client, world.token, "titles").json["results"] == []
    other = make.member(world.company, "member")
    connect(app, other, world.company, github_body("user"))
    # Someone else's personal GitHub: its tool words are not searched for this run.
    assert search(client, world.token, "titles").json["results"] == []
    connect(app, world.owner, world.company, github_body())
    found = search(client, world.token, "checklist titles").json["results"]
    assert [r["service"] for r in found] == ["github"]
    assert found[0]["state"] == "ready"
    # A matched tool word counts like a matched name word: one word each ties GitHub with the memory apps (by name).
    tied = search(client, world.token, "titles memory").json["results"]
    assert "github" in [r["service"] for r in tied] and len(tied) > 1
    assert [r["name"].casefold() for r in tied] == sorted(r["name"].casefold() for r in tied)
    both = search(client, world.token, "titles github memory").json["results"]
    assert both[0]["service"] == "github"


def test_search_statements_do_not_grow_with_the_catalog_or_the_company(
    client, db, world, real_catalog_restored
):
    from app.catalog.loader import content_hash, search_fields
    from app.models import CatalogApp, ToolConnection

    def measured(query):
        search(client, world.token, query)  # parse the definitions once in this process
        clear_search_indexes()  # measure building the audience's index, not answering from it
        with count_statements(db.engine) as statements:
            assert search(client, world.token, query).status_code == 200
        return len(statements)

    base = db.session.get(CatalogApp, "notion")

    def add_copies(numbers):
        """Catalog apps like Notion, each with a company connection the agent is not installed on."""
        for n in numbers:
            definition = {**base.definition, "slug": f"notion-copy-{n}", "name": f"Notion copy {n}"}
            db.session.add(
                CatalogApp(
                    slug=definition["slug"],
                    name=definition["name"],
                    description=base.description,
                    categories=[],
                    definition=definition,
                    content_hash=content_hash(definition),
                    **search_fields(definition),
                )
            )
            db.session.add(
                ToolConnection(
                    company_id=world.company.id,
                    app_slug=definition["slug"],
                    name=f"Notion copy {n}",
                    status="active",
                    enabled=True,
                )
            )
        db.session.commit()

    add_copies(range(1))
    before = {q: measured(q) for q in ("", "notion pages")}
    add_copies(range(1, 61))
    after = {q: measured(q) for q in ("", "notion pages")}
    assert after == before
    results = search(client, world.token, "notion pages").json["results"]
    assert len(results) == 20 and results[0]["service"] == "notion"
    assert all(r["state"] == "needs_user_action" for r in results[1:])


@pytest.mark.parametrize(
    "service", ["slack-but-not", "custom", "connection:nope", "https://evil.example/mcp"]
)
def test_unknown_services_are_not_available(client, world, service):
    response = request_service(client, world.token, service)
    assert response.status_code == 422 and response.json == {"error": NOT_AVAILABLE.format(service)}


def test_request_body_is_validated(client, world):
    for body in ({}, {"service": "   "}, {"service": "x" * 121}, {"service": "github", "extra": 1}):
        response = client.post(REQUEST_URL, json=body, headers=bearer(world.token))
        assert response.status_code == 400 and response.json["error"] == "Validation error", body


# --- request: cards ------------------------------------------------------------------------------------------


def _cards(db):
    db.session.expire_all()
    return db.session.scalars(select(ThreadInteraction).order_by(ThreadInteraction.created_at)).all()


def test_request_creates_one_card_and_reuses_it(make, client, db, world):
    first = request_service(client, world.token, " github ")
    assert first.status_code == 200
    data = first.json
    (card,) = _cards(db)
    # The whole answer, word for word as the contract shows it.
    assert data == {
        "version": 1,
        "service": "github",
        "state": "needs_user_action",
        "connectionId": None,
        "interactionId": str(card.id),
        "instruction": "A connection card was sent to the responsible user. End this run and wait for continuation.",
    }
    assert str(card.id) == data["interactionId"]
    assert card.kind == "connection_intent" and card.status == "pending"
    assert card.title == "Connect GitHub" and card.summary == "Builder needs this connection to continue."
    assert card.addressee_user_id == world.owner.id and card.requesting_agent_id == world.agent.id
    assert card.source_run_id == world.run.id
    assert card.idempotency_key == f"connection-intent:{world.run.id}:{world.owner.id}:github"
    assert card.payload == {
        "version": 1,
        "serviceSlug": "github",
        "serviceName": "GitHub",
        "serviceLogoUrl": card.payload["serviceLogoUrl"],
        "requestingAgentId": str(world.agent.id),
        "requestingAgentName": "Builder",
        "phase": "requested",
    }
    assert card.payload["serviceLogoUrl"].startswith("/static/img/apps/")

    again = request_service(client, world.token, "github")
    assert again.json == data
    # A later run of the same agent on the same task for the same person reuses the pending card.
    _run2, token2 = make.run(world.agent, world.issue)
    assert request_service(client, token2, "github").json["interactionId"] == data["interactionId"]
    assert len(_cards(db)) == 1
    created = db.session.scalars(
        select(ActivityLog).where(ActivityLog.action == "issue.thread_interaction_created")
    ).all()
    assert len(created) == 1
    assert created[0].details == {
        "interactionId": data["interactionId"],
        "interactionKind": "connection_intent",
        "purpose": None,
    }
    assert created[0].actor_type == "agent" and created[0].run_id == world.run.id


def test_a_different_addressee_supersedes_the_pending_card(client, db, make, world):
    first = request_service(client, world.token, "notion").json["interactionId"]
    other = make.member(world.company, "admin")
    _run, token = make.run(world.agent, world.issue, responsible=other)
    second = request_service(client, token, "notion").json["interactionId"]
    assert second != first
    old, new = (db.session.get(ThreadInteraction, uuid.UUID(i)) for i in (first, second))
    assert old.status == "expired"
    assert old.result == {"version": 1, "outcome": "superseded", "supersededByInteractionId": second}
    assert new.status == "pending" and new.addressee_user_id == other.id
    # Another service keeps its own card.
    assert request_service(client, token, "github").json["interactionId"] not in (first, second)


def test_declined_continuation_cannot_request_the_same_service(app, client, db, world):
    card_id = request_service(client, world.token, "github").json["interactionId"]
    board = app.test_client()
    declined = board_api(
        board, world.owner, "POST", f"/api/connection-intents/{card_id}/decline", {"reason": "no"}
    )
    assert declined.status_code == 200
    continuation = HeartbeatRun(
        company_id=world.company.id,
        agent_id=world.agent.id,
        issue_id=world.issue.id,
        responsible_user_id=world.owner.id,
        status="running",
        context_snapshot={
            "issueId": str(world.issue.id),
            "interactionId": card_id,
            "interactionStatus": "rejected",
            "outcome": "declined",
        },
    )
    db.session.add(continuation)
    db.session.commit()
    token = mint_run_token(continuation).token
    again = request_service(client, token, "github")
    assert again.status_code == 409
    assert again.json == {
        "error": "The user declined this connection. Pursue alternatives; do not request it again in this "
        "continuation."
    }
    assert request_service(client, token, "notion").status_code == 200


DECLINED = {
    "error": "The user declined this connection. Pursue alternatives; do not request it again in this continuation."
}


def decline_card(app, user, card_id):
    declined = board_api(
        app.test_client(), user, "POST", f"/api/connection-intents/{card_id}/decline", {"reason": "no"}
    )
    assert declined.status_code == 200, declined.json


def continuation_of(db, world, card_id, outcome):
    """The run a resolved card wakes (as the continuation worker opens it: the card's id in its context)."""
    run = HeartbeatRun(
        company_id=world.company.id,
        agent_id=world.agent.id,
        issue_id=world.issue.id,
        responsible_user_id=world.owner.id,
        status="running",
        context_snapshot={
            "issueId": str(world.issue.id),
            "interactionId": card_id,
            "interactionStatus": "rejected" if outcome == "declined" else "accepted",
            "outcome": outcome,
        },
    )
    db.session.add(run)
    db.session.commit()
    return mint_run_token(run).token


def test_the_run_whose_card_was_declined_and_its_continuation_cannot_request_it_again(
    make, app, client, db, world
):
    github = request_service(client, world.token, "github").json["interactionId"]
    notion = request_service(client, world.token, "notion").json["interactionId"]
    decline_card(app, world.owner, github)
    again = request_service(client, world.token, "github")
    assert again.status_code == 409 and again.json == DECLINED
    assert [c.status for c in _cards(db)] == ["rejected", "pending"]  # no second GitHub card
    # The continuation woken by the other card continues the same run: GitHub stays declined there too.
    decline_card(app, world.owner, notion)
    token = continuation_of(db, world, notion, "declined")
    refused = request_service(client, token, "github")
    assert refused.status_code == 409 and refused.json == DECLINED
    assert request_service(client, token, "notion").json == DECLINED
    assert request_service(client, token, "linear").json["state"] == "needs_user_action"
    assert [c.payload["serviceSlug"] for c in _cards(db)] == ["github", "notion", "linear"]
    # A later run that continues nothing may ask again (the refusal holds for the continuation only).
    _run, fresh = make.run(world.agent, world.issue)
    assert request_service(client, fresh, "github").json["state"] == "needs_user_action"


@pytest.mark.postgres_only
def test_twenty_concurrent_identical_requests_create_one_card(app, db, world):
    barrier = threading.Barrier(20)
    answers: list[tuple[int, str | None]] = []
    lock = threading.Lock()

    def worker():
        client = app.test_client()
        barrier.wait()
        response = request_service(client, world.token, "github")
        with lock:
            answers.append((response.status_code, (response.json or {}).get("interactionId")))

    threads = [threading.Thread(target=worker) for _ in range(20)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(answers) == 20
    assert {status for status, _ in answers} == {200}
    assert len({interaction for _, interaction in answers}) == 1
    _db.session.expire_all()
    assert _db.session.scalar(select(func.count()).select_from(ThreadInteraction)) == 1
    assert (
        _db.session.scalar(
            select(func.count())
            .select_from(ActivityLog)
            .where(ActivityLog.action == "issue.thread_interaction_created")
        )
        == 1
    )


def test_the_database_refuses_a_second_pending_card_with_the_same_key(db, world):
    from sqlalchemy.exc import IntegrityError

    def card(status="pending"):
        return ThreadInteraction(
            company_id=world.company.id,
            issue_id=world.issue.id,
            kind="connection_intent",
            status=status,
            idempotency_key=f"connection-intent:{world.run.id}:{world.owner.id}:github",
        )

    db.session.add_all([card(), card("expired")])
    db.session.commit()
    db.session.add(card())
    with pytest.raises(IntegrityError):
        db.session.commit()
    db.session.rollback()
