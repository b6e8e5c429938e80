"""The explainer and the policy dry run as JSON, against a connection set up with the real Honcho-shaped MCP peer."""

from __future__ import annotations

import uuid

from sqlalchemy import select

from app.models import ThreadInteraction
from app.services.gateway.arguments import canonical_digest
from tests.doors import approval_card
from tests.peers.mcp_servers import HONCHO_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import api, connect, patch

world = test_gateway.world  # Acme, Builder on a live run, the owner signed in (`client`, `csrf`)


def explain(world, connection_id, agent_id=None, tool=None):
    url = f"/api/tool-connections/{connection_id}/access/{agent_id or world.agent.id}"
    return world.client.get(url + (f"/tools/{tool}" if tool else ""))


def dry_run(world, connection_id, body):
    return api(world.client, world.csrf, "POST", f"/api/tool-connections/{connection_id}/dry-run", body)


def test_the_explainer_says_ready_and_names_the_first_failing_check(app, db, world, honcho_server):
    honcho = connect(world, "honcho", HONCHO_KEY)
    answer = explain(world, honcho["id"])
    assert answer.status_code == 200, answer.json
    assert answer.json["ready"] is True and answer.json["firstFailure"] is None
    assert answer.json["summary"] == f"Ready: Builder can use {honcho['name']}."
    assert [c["name"] for c in answer.json["checks"]] == [
        "grant",
        "audience",
        "identity_owner",
        "enabled",
        "health",
        "credentials",
        "policy",
        "quarantine",
        "limit",
        "required_configuration",
    ]
    save = explain(world, honcho["id"], tool="save_memory").json
    assert save["ready"] is True and save["action"] == "ask_first" and save["tool"] == "save_memory"

    patch(world, honcho["id"], {"audience": {"allAgents": False, "agentIds": []}})
    refused = explain(world, honcho["id"]).json
    assert refused["ready"] is False
    assert refused["firstFailure"] == {
        "check": "audience",
        "reason": "not_installed",
        "message": "The connection is not installed for this agent: add the agent (or all agents) to its agent "
        "access.",
    }
    statuses = {c["name"]: c["status"] for c in refused["checks"]}
    assert statuses["audience"] == "fail" and statuses["grant"] == "pass" and statuses["limit"] == "pass"


def test_the_dry_run_applies_managed_arguments_and_gives_the_approvals_digest_without_calling(
    app, db, world, honcho_server
):
    honcho = connect(world, "honcho", HONCHO_KEY)
    honcho_server.reset()
    body = {
        "agentId": str(world.agent.id),
        "tool": "save_memory",
        "arguments": {"content": "hi", "workspace_id": "x"},
    }
    answer = dry_run(world, honcho["id"], body)
    assert answer.status_code == 200, answer.json
    projected = {"content": "hi", "workspace_id": "team-workspace"}  # the connection's workspace wins
    assert answer.json["decision"] == "ask_first"
    assert answer.json["arguments"] == projected
    assert answer.json["managedArguments"] == ["workspace_id"]
    assert answer.json["argumentsDigest"] == canonical_digest(projected)
    assert answer.json["explanation"]["ready"] is True
    assert honcho_server.calls == []  # the provider was never contacted

    # The approval a real call opens is bound to the same digest.
    approval_id = approval_card(world, "honcho__save_memory", content="hi", workspace_id="x")
    card = db.session.scalar(select(ThreadInteraction).where(ThreadInteraction.id == uuid.UUID(approval_id)))
    assert card.payload["argumentsDigest"] == answer.json["argumentsDigest"]
    assert honcho_server.calls == []

    patch(world, honcho["id"], {"toolPolicies": {"save_memory": "block", "search_memory": "allow"}})
    blocked = dry_run(world, honcho["id"], body).json
    assert blocked["decision"] == "blocked"
    assert blocked["explanation"]["firstFailure"]["reason"] == "blocked"
    allowed = dry_run(
        world, honcho["id"], {**body, "tool": "search_memory", "arguments": {"query": "q"}}
    ).json
    assert allowed["decision"] == "allowed"
    unknown = dry_run(world, honcho["id"], {**body, "tool": "nope"}).json
    assert unknown["decision"] == "unavailable" and unknown["argumentsDigest"] is None
    assert unknown["message"] == "The call would not reach the tool. The connection has no tool named nope."
    assert honcho_server.calls == []


def test_doors_refuse_other_companies_bad_bodies_and_strangers(app, db, make, world, honcho_server):
    honcho = connect(world, "honcho", HONCHO_KEY)
    stranger = make.agent(make.company("Other Co"), "Stranger")
    assert explain(world, honcho["id"], agent_id=stranger.id).status_code == 404
    assert explain(world, honcho["id"], agent_id="not-a-uuid").status_code == 404
    assert explain(world, uuid.uuid4()).status_code == 404
    body = {"agentId": str(world.agent.id), "tool": "save_memory", "arguments": {}}
    assert dry_run(world, honcho["id"], {**body, "agentId": str(stranger.id)}).status_code == 404
    bad = dry_run(world, honcho["id"], {**body, "arguments": ["not", "an", "object"]})
    assert bad.status_code == 400 and bad.json["error"] == "Validation error"
    assert dry_run(world, honcho["id"], {**body, "tool": ""}).status_code == 400
    assert dry_run(world, honcho["id"], {**body, "extra": 1}).status_code == 400
    no_csrf = world.client.post(f"/api/tool-connections/{honcho['id']}/dry-run", json=body)
    assert no_csrf.status_code == 400
    anonymous = app.test_client()
    assert anonymous.get(f"/api/tool-connections/{honcho['id']}/access/{world.agent.id}").status_code == 401
